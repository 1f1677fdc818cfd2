"""The calibration's second reward: the rewards library's mixed reward, as the real trainer will see it.

Sessions recorded in memory are turned into the protobuf events and model calls the pipelines would
rebuild (a SessionRecord), labelled with liverl.rewards.label and mixed with liverl.rewards.mix.
"""

from __future__ import annotations

import time
from collections import defaultdict

from demo.product.memory_recorder import MemoryRecorder, RecordedEvent
from demo.product.policy import MAIN_AGENT_ID, ROLE_SINGLE, Completion

_ROLES = {"single": 1, "orchestrator": 2, "subagent": 3}  # liverl.v1.AgentRole values


class RecordingPolicy:
    """Wraps a policy and keeps every completion as the ModelCall serving would have recorded."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.model_calls: dict[str, list] = defaultdict(list)

    def generate(
        self, prompt_text: str, session_id: str, agent_role: str = ROLE_SINGLE, agent_id: str = MAIN_AGENT_ID
    ) -> Completion:
        from liverl.v1 import model_call_pb2

        started = int(time.time() * 1000)
        completion = self.inner.generate(prompt_text, session_id, agent_role, agent_id)
        self.model_calls[session_id].append(model_call_pb2.ModelCall(
            request_id=completion.request_id, session_id=session_id, agent_role=_ROLES[agent_role],
            agent_id=agent_id, policy_version=completion.policy_version,
            prompt_token_ids=completion.prompt_token_ids, completion_token_ids=completion.token_ids,
            completion_logprobs=completion.logprobs, request_time_ms=started, finish_time_ms=int(time.time() * 1000),
        ))
        return completion


def to_session_event(event: RecordedEvent, sequence: int):
    """A RecordedEvent as the SessionEvent the SDK would have sent (field names are the proto's)."""
    from liverl.v1 import session_event_pb2

    fields = dict(event.fields)
    message = session_event_pb2.SessionEvent(
        event_id=f"{event.session_id}-{sequence}", session_id=event.session_id, tenant_id="demo",
        agent_role=_ROLES.get(event.agent_role, 1), agent_id=event.agent_id, sequence=sequence,
        event_time_ms=int(time.time() * 1000), user_id=str(fields.pop("user_id", "")),
    )
    body = getattr(message, event.kind)
    body.SetInParent()
    for name, value in fields.items():
        if isinstance(value, dict):
            getattr(body, name).update({str(k): str(v) for k, v in value.items()})
        elif isinstance(value, (list, tuple)):
            getattr(body, name).extend(value)
        else:
            setattr(body, name, int(value) if name == "kind" else value)
    return message


def library_rewards(recorder: MemoryRecorder, policy: RecordingPolicy, sessions, step: int, config) -> list[float]:
    """The mixed reward of each session's main agent, in the order of `sessions` (SessionStats)."""
    from liverl.rewards import SessionRecord, label, mix

    rewards = []
    for stats in sessions:
        events = tuple(to_session_event(e, i) for i, e in enumerate(recorder.of_session(stats.session_id)))
        record = SessionRecord(stats.session_id, "demo", events, tuple(policy.model_calls[stats.session_id]))
        components = label(record, MAIN_AGENT_ID, config).components
        rewards.append(mix(components, stats.family, step, config))
    return rewards
