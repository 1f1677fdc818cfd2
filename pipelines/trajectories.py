"""Token-level trajectories: one row per (session, agent), the agent's model calls chained in request order.

Layout of one trajectory (all arrays (T,)):
  segment 0: [prompt of call 0 | completion 0 | context delta 1 | completion 1 | ...]
  segment 1: [full prompt of call k | completion k | ...]      <- call k's prompt did not extend the chain
A call whose prompt starts with the chain so far contributes only the new context (user text, tool
output: loss mask 0, logprob 0) and its completion (loss mask 1 when the agent is trainable, with the
behaviour logprobs). When the prompt does not extend the chain (self-summarisation rewrote the context,
or a template re-tokenised it) a new segment starts with the call's whole prompt. Segments stay in ONE
trajectory, so the session's final reward applies to every token of the chain, summaries included
(Composer 2). `segment_starts` lists where each segment begins: the trainer scores each segment as its
own sequence. Sub-agents are frozen: their tokens are observations (mask 0) but their trajectories are
kept, with `parent_agent_id` and the spawning stage, so the parallel graph and critical steps survive.
"""

from __future__ import annotations

import hashlib

import apache_beam as beam

from liverl.config.rewards import RewardsConfig
from liverl.rewards import label as reward_label
from liverl.rewards.session import SessionRecord
from liverl.table_schema import TABLE_SCHEMA_VERSION
from liverl.v1.common_pb2 import AgentRole
from pipelines import dead_letters
from pipelines.sessionize import summarize

DEAD = "dead"

ROLE_NAMES = {AgentRole.AGENT_ROLE_SINGLE: "single", AgentRole.AGENT_ROLE_ORCHESTRATOR: "orchestrator",
              AgentRole.AGENT_ROLE_SUBAGENT: "subagent",
              AgentRole.AGENT_ROLE_UNSPECIFIED: "single"}  # no role given: a lone agent
TRAINABLE_ROLES = {"single", "orchestrator"}


def trajectory_id(tenant_id: str, session_id: str, agent_id: str) -> str:
    """Deterministic, so a re-run of the same session yields the same id."""
    return hashlib.sha256(f"{tenant_id}|{session_id}|{agent_id}".encode()).hexdigest()[:32]


def check_session(session: SessionRecord) -> tuple[str, str] | None:
    """(reason, message) when the session's model calls cannot be turned into token sequences."""
    mismatched = [c.request_id or c.event_id for c in session.model_calls
                  if len(c.completion_logprobs) != len(c.completion_token_ids)]
    if mismatched:
        return dead_letters.TOKEN_MISMATCH, (
            f"model calls {mismatched} have completion_logprobs not aligned with completion_token_ids")
    known = {c.request_id for c in session.model_calls}
    referenced = []
    for event in session.events:
        body = event.WhichOneof("body")
        if body in ("tool_call", "summary"):
            request_id = getattr(event, body).request_id
            if request_id and request_id not in known:
                referenced.append(f"{body}:{request_id}")
    if referenced:
        return dead_letters.MISSING_MODEL_CALL, f"events reference requests with no ModelCall: {referenced}"
    return None


def chain_tokens(calls, trainable: bool) -> dict:
    """The token arrays, spans and segment starts of one agent's calls (already in request order)."""
    tokens: list[int] = []
    mask: list[int] = []
    logprobs: list[float] = []
    span_starts, span_ends, span_versions, segment_starts = [], [], [], []
    context: list[int] = []  # what the model has seen in the current segment: prompts + completions
    for call in calls:
        prompt = list(call.prompt_token_ids)
        if context and prompt[:len(context)] == context:
            delta = prompt[len(context):]
        else:
            segment_starts.append(len(tokens))
            delta = prompt
        completion = list(call.completion_token_ids)
        span_starts.append(len(tokens))
        tokens += delta + completion
        mask += [0] * len(delta) + [int(trainable)] * len(completion)
        logprobs += [0.0] * len(delta) + (list(call.completion_logprobs) if trainable else [0.0] * len(completion))
        span_ends.append(len(tokens))
        span_versions.append(call.policy_version)
        context = prompt + completion
    return {"token_ids": tokens, "loss_mask": mask, "behaviour_logprobs": logprobs, "span_starts": span_starts,
            "span_ends": span_ends, "span_policy_versions": span_versions, "segment_starts": segment_starts,
            "policy_versions": list(dict.fromkeys(span_versions))}


def label_agents(session: SessionRecord, agent_ids: list[str], rewards: RewardsConfig, judge=None,
                 label_fn=reward_label) -> dict:
    """agent id -> RewardLabel, or the exception the reward library raised for that agent.

    Without a judge: liverl.rewards.label per agent (contract 5). With the judge enabled: the library's
    label_batch, which fetches every verdict of the session in one judge_many call, then labels.
    """
    if judge is not None:
        from liverl.rewards.batch import label_batch

        try:
            return dict(zip(agent_ids, label_batch([(session, a) for a in agent_ids], rewards, judge)))
        except Exception:  # find the agent that fails; the others keep their labels
            def label_fn(one_session, agent_id, config):
                return label_batch([(one_session, agent_id)], config, judge)[0]
    labels: dict = {}
    for agent_id in agent_ids:
        try:
            labels[agent_id] = label_fn(session, agent_id, rewards)
        except Exception as error:  # a reward bug must not stop the pipeline: the agent becomes a dead letter
            labels[agent_id] = error
    return labels


def build_rows(session: SessionRecord, rewards: RewardsConfig, batch_id: str, distilled_at_ms: int,
               judge=None, label_fn=reward_label) -> tuple[list[dict], list[dict]]:
    """(trajectory rows, dead letters) of one ready session."""
    problem = check_session(session)
    if problem:
        reason, message = problem
        return [], [dead_letters.session_dead_letter(reason, message, session.session_id, summarize(session))]
    start_event = next(e for e in session.events if e.WhichOneof("body") == "session_start")
    end_event = next((e for e in session.events if e.WhichOneof("body") == "session_end"), None)
    graph = _spawn_graph(session)
    by_agent: dict[str, list] = {}
    for call in session.model_calls:
        by_agent.setdefault(call.agent_id or "main", []).append(call)
    turns = sum(1 for e in session.events if e.WhichOneof("body") == "user_message")
    labels = label_agents(session, list(by_agent), rewards, judge, label_fn)
    rows, dead = [], []
    for agent_id, calls in by_agent.items():
        role = ROLE_NAMES.get(calls[0].agent_role, "single")
        label = labels[agent_id]
        if isinstance(label, Exception):
            dead.append(dead_letters.session_dead_letter(
                dead_letters.LABEL_FAILED, f"reward library failed for agent {agent_id}: {label!r}",
                session.session_id, summarize(session) | {"agent_id": agent_id}, agent_id))
            continue
        parent, stage = graph.get(agent_id, (None, None))
        signals = {k: float(v) for k, v in label.signals.items()}
        if stage is not None:
            signals["spawn_stage"] = float(stage)
        chain = chain_tokens(calls, trainable=role in TRAINABLE_ROLES)
        start_ms = start_event.event_time_ms or calls[0].request_time_ms
        rows.append({
            "trajectory_id": trajectory_id(session.tenant_id, session.session_id, agent_id),
            "session_id": session.session_id,
            "tenant_id": session.tenant_id,
            "task_family": start_event.session_start.task_family,
            "task_id": start_event.session_start.task_id,
            "agent_role": role,
            "agent_id": agent_id,
            "parent_agent_id": parent,
            **chain,
            "reward_components": {k: float(v) for k, v in label.components.items()},
            "reward_config_version": label.config_version or rewards.version,
            "signals": signals,
            "critical_steps": int(label.critical_steps),
            "num_turns": turns,
            "num_model_calls": len(calls),
            "session_start_ms": start_event.event_time_ms,
            "session_end_ms": end_event.event_time_ms if end_event else None,
            "first_served_ms": min(c.request_time_ms for c in calls),
            "distilled_at_ms": distilled_at_ms,
            "batch_id": batch_id,
            "schema_version": TABLE_SCHEMA_VERSION,
            "event_date": dead_letters.utc_date(start_ms),
        })
    return rows, dead


def _spawn_graph(session: SessionRecord) -> dict[str, tuple[str, int | None]]:
    """sub-agent id -> (the agent that created it, the orchestrator stage that first assigned it a task)."""
    parents: dict[str, str] = {}
    stages: dict[str, int] = {}
    for event in session.events:
        body = event.WhichOneof("body")
        if body == "subagent_created":
            parents[event.subagent_created.subagent_id] = event.agent_id or "main"
        elif body == "task_assigned":
            stages.setdefault(event.task_assigned.subagent_id, event.task_assigned.stage)
    return {agent: (parent, stages.get(agent)) for agent, parent in parents.items()}


class BuildTrajectories(beam.DoFn):
    """SessionRecord -> trajectory rows; tagged DEAD: sessions that cannot be rebuilt."""

    def __init__(self, rewards: RewardsConfig, batch_id: str, distilled_at_ms: int):
        self._rewards = rewards
        self._batch_id = batch_id
        self._distilled_at_ms = distilled_at_ms
        self.trajectories = beam.metrics.Metrics.counter("distill", "trajectories")
        self._judge = None

    def setup(self):
        if self._rewards.judge.enabled:  # the reward library's only I/O: one client per worker
            from liverl.rewards.judge import Judge

            self._judge = Judge(self._rewards.judge)

    def process(self, session: SessionRecord):
        rows, dead = build_rows(session, self._rewards, self._batch_id, self._distilled_at_ms, self._judge)
        for row in rows:
            self.trajectories.inc()
            yield row
        for letter in dead:
            yield beam.pvalue.TaggedOutput(DEAD, letter)

    def teardown(self):
        if self._judge is not None:
            self._judge.close()

