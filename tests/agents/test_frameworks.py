"""Real agent frameworks, unchanged, against a live `liverl serve` (tests/agents/conftest.py): the OpenAI Agents
SDK (Responses, Chat Completions, streamed), smolagents' ToolCallingAgent and pydantic-ai. Each run is one
function-tool round trip on SmolLM2-135M-Instruct, sent with no liverl header; each must be recorded as one
session whose tool call is linked to the model call that made it and its result to the call, then distilled
into one trajectory, traced in MLflow, and trained on. Finally the README's adoption example runs as written.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path

import pytest

from tests.agents.conftest import CALL, MAX_TOKENS, STEER, TASK, weather

pytestmark = [pytest.mark.slow, pytest.mark.big_memory]

README = Path(__file__).resolve().parents[2] / "README.md"
SMOLAGENTS_STEER = f"You only ever output JSON. Example:\nUser: New task:\n{TASK}\nAssistant: {json.dumps(CALL)}"


def one_session(loop, framework: str, tool_calls: list[str], runs: int = 1) -> str:
    """The run's calls all in one session, its tool called as the model asked (`runs` times: smolagents' model may
    call it again before its final answer); the session closed for training."""
    sessions = loop.new_calls()
    assert tool_calls == ["Paris"] * len(tool_calls) and 1 <= len(tool_calls) <= runs, \
        f"{framework}: the tool ran {tool_calls} (SmolLM2 did not emit the call?)"
    loop.tool_runs[framework] = len(tool_calls)
    assert len(sessions) == 1, {s: [c.request_id for c in calls] for s, calls in sessions.items()}
    (session_id, calls), = sessions.items()
    assert len(calls) >= 2, f"{framework}: {len(calls)} model call(s): the tool's result was never sent back"
    assert all(call.policy_version == "1" for call in calls)
    loop.close_session(framework, session_id)
    return session_id


# ---- the OpenAI Agents SDK -------------------------------------------------------------------------------------

def agents_sdk_agent(loop, chat_completions: bool):
    from agents import Agent, ModelSettings, OpenAIChatCompletionsModel, OpenAIResponsesModel, function_tool
    from openai import AsyncOpenAI

    called: list[str] = []

    @function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        called.append(city)
        return weather(city)

    client = AsyncOpenAI(base_url=loop.base_url, api_key="agent-key")
    model = (OpenAIChatCompletionsModel if chat_completions else OpenAIResponsesModel)(
        model=loop.model, openai_client=client)
    agent = Agent(name="weather", instructions=STEER, tools=[get_weather], model=model,
                  model_settings=ModelSettings(temperature=0.0, max_tokens=MAX_TOKENS))
    return agent, called


@pytest.fixture(autouse=True)
def _no_agents_sdk_tracing():
    """The Agents SDK would export its own traces to OpenAI's servers: off, as the README's example says."""
    from agents import set_tracing_disabled

    set_tracing_disabled(True)


@pytest.mark.parametrize("mode", ["responses", "chat-completions"])
def test_agents_sdk_run(agent_loop, mode):
    from agents import Runner

    agent, called = agents_sdk_agent(agent_loop, chat_completions=mode == "chat-completions")
    result = Runner.run_sync(agent, TASK, max_turns=3)
    assert "sunny" in result.final_output.lower(), result.final_output
    one_session(agent_loop, f"agents-sdk-{mode}", called)


def test_agents_sdk_streamed(agent_loop):
    from agents import Runner

    agent, called = agents_sdk_agent(agent_loop, chat_completions=False)

    async def run() -> tuple[object, list[str]]:
        streamed = Runner.run_streamed(agent, TASK, max_turns=3)
        kinds = [event.type async for event in streamed.stream_events()]
        return streamed, kinds

    streamed, kinds = asyncio.run(run())
    assert "raw_response_event" in kinds and "run_item_stream_event" in kinds, set(kinds)
    assert "sunny" in streamed.final_output.lower(), streamed.final_output
    one_session(agent_loop, "agents-sdk-streamed", called)


# ---- smolagents ------------------------------------------------------------------------------------------------

def test_smolagents_tool_calling_agent(agent_loop):
    from smolagents import OpenAIServerModel, ToolCallingAgent, tool

    called: list[str] = []

    @tool
    def get_weather(city: str) -> str:
        """The weather in a city.

        Args:
            city: the city's name.
        """
        called.append(city)
        return f"Sunny. Now call final_answer: The weather in {city} is sunny."  # smolagents' way to say it

    # smolagents as it comes: its own system prompt (~1,000 tokens) and tool_choice "required", which serving honours
    # by opening the reply as a tool call (docs/capture.md). It sends each tool call back as assistant text quoting
    # it ("Calling tools: [...]") and the result as a user "Observation:" message: stitched by the quoted call's id.
    model = OpenAIServerModel(model_id=agent_loop.model, api_base=agent_loop.base_url, api_key="agent-key",
                              temperature=0.0, max_tokens=MAX_TOKENS)
    agent = ToolCallingAgent(tools=[get_weather], model=model, max_steps=2, instructions=SMOLAGENTS_STEER,
                             verbosity_level=0)
    agent.run(TASK)
    one_session(agent_loop, "smolagents", called, runs=2)  # SmolLM2 may repeat the call in its second step


# ---- pydantic-ai -----------------------------------------------------------------------------------------------

def test_pydantic_ai_agent(agent_loop):
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider
    from pydantic_ai.settings import ModelSettings
    from pydantic_ai.usage import UsageLimits

    called: list[str] = []
    model = OpenAIChatModel(agent_loop.model, provider=OpenAIProvider(base_url=agent_loop.base_url,
                                                                      api_key="agent-key"))
    agent = Agent(model, instructions=STEER, model_settings=ModelSettings(temperature=0.0, max_tokens=MAX_TOKENS))

    @agent.tool_plain
    def get_weather(city: str) -> str:
        """The weather in a city."""
        called.append(city)
        return weather(city)

    result = agent.run_sync(TASK, usage_limits=UsageLimits(request_limit=3))
    assert "sunny" in result.output.lower(), result.output
    one_session(agent_loop, "pydantic-ai", called)


# ---- one trajectory each, traced, trained on ------------------------------------------------------------------

def session_events(loop, session_id: str) -> list:
    from liverl.v1 import session_event_pb2
    from tests.serving.conftest import read_topic

    records = read_topic(loop.config, loop.config.kafka.session_events_topic, expect=10**6, timeout_s=5)
    events = [session_event_pb2.SessionEvent.FromString(r.value) for r in records]
    return sorted([e for e in events if e.session_id == session_id], key=lambda e: (e.event_time_ms, e.sequence))


def test_each_run_is_one_trajectory_with_its_tool_round_trip_traced_and_trained_on(agent_loop, monkeypatch):
    import mlflow

    from liverl.io.table_history import TableHistory
    from liverl.io.traces import TAG_TRAINING_TRACES
    from liverl.io.tracking import Tracking
    from pipelines.distill import distill_once
    from tests.e2e.test_erasure import train_once
    from trainer.io.registry import Registry

    loop = agent_loop
    assert loop.sessions, "no framework run was recorded"
    for framework, session_id in loop.sessions.items():  # serving linked the tool call and its result
        events = session_events(loop, session_id)
        kinds = [e.WhichOneof("body") for e in events]
        runs = loop.tool_runs[framework]
        assert kinds.count("tool_call") == runs and kinds.count("tool_result") == runs, (framework, runs, kinds)
        call = next(e.tool_call for e in events if e.WhichOneof("body") == "tool_call")
        result = next(e.tool_result for e in events if e.WhichOneof("body") == "tool_result")
        assert kinds.index("tool_call") < kinds.index("tool_result"), (framework, kinds)
        assert call.name == "get_weather" and json.loads(call.arguments_json) == {"city": "Paris"}, framework
        assert result.call_id == call.call_id and "sunny" in result.output, framework

    for _ in range(3):  # sessions end by the SDK's end event; the clock far ahead closes any left open
        report = distill_once(loop.config, now_ms=int(time.time() * 1000) + 3_600_000)
        # runs nobody closed (a failed or expected-to-fail run's calls) have no session start: dead letters
        assert set(report.dead_letters) <= {"missing_session_start"}, report.line()
    rows = {}
    for row in TableHistory(loop.config.table.trajectories_uri).rows_up_to():
        rows.setdefault(row["session_id"], []).append(row)
    for framework, session_id in loop.sessions.items():
        assert len(rows.get(session_id, [])) == 1, (framework, session_id, sorted(rows))
        (row,) = rows[session_id]
        assert row["num_model_calls"] >= 2 and row["task_family"] == "weather", (framework, row["num_model_calls"])

    experiment = Tracking(loop.config.mlflow.tracking_uri).experiment_id(loop.config.mlflow.audit_experiment)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", loop.config.mlflow.tracking_uri)  # for mlflow.search_traces only
    traces = {t.info.tags.get("liverl.session_id"): t
              for t in mlflow.search_traces(locations=[experiment], return_type="list")}
    for framework, session_id in loop.sessions.items():  # the round trip, in order, in the trajectory's trace
        # by start time; spans of one millisecond keep the trace's own order (a stitched call's tool events are
        # stamped when that call arrived, and the trace puts events before the call of the same millisecond)
        spans = sorted(traces[session_id].data.spans, key=lambda s: s.start_time_ns)
        names = [s.name for s in spans if s.name.startswith(("model call", "tool "))]
        assert names[:3] == ["model call 1 (v1)", "tool get_weather", "model call 2 (v1)"], (framework, names)
        tool = next(s for s in spans if s.name == "tool get_weather")
        first_call = next(s for s in spans if s.name == "model call 1 (v1)")
        assert tool.attributes["liverl.request_id"] == first_call.attributes["liverl.request_id"], framework
        assert "sunny" in json.dumps(tool.outputs).lower(), (framework, tool.outputs)

    loop.config.trainer.lora.enabled = True
    loop.config.trainer.lora.rank = 4
    trained = train_once(loop.config, loop.base_folder)  # the base is registered already: found by its digest
    expression = Registry(loop.config.mlflow).tags(trained)[TAG_TRAINING_TRACES]
    found = {t.info.tags.get("liverl.session_id")
             for t in mlflow.search_traces(locations=[experiment], filter_string=expression, return_type="list")}
    assert set(loop.sessions.values()) <= found, (trained, expression, found)


# ---- the README's adoption example, as written -----------------------------------------------------------------

def adoption_example() -> str:
    text = README.read_text()
    blocks = re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)
    (block,) = [b for b in blocks if "from agents import" in b]
    return block


def test_the_readme_agents_sdk_example_runs_against_serving(agent_loop, monkeypatch):
    monkeypatch.setenv("LIVERL_SERVING_URL", agent_loop.serving.http_base)
    monkeypatch.setenv("LIVERL_API_KEY", "agent-key")
    namespace: dict = {}
    exec(compile(adoption_example(), str(README), "exec"), namespace)  # noqa: S102 - the example, verbatim
    assert isinstance(namespace["result"].final_output, str)
    sessions = agent_loop.new_calls()
    assert len(sessions) == 1 and all(c.policy_version == "1" for calls in sessions.values() for c in calls), sessions
