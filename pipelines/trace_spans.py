"""One committed trajectory as an MLflow trace: its session's timeline as spans, its rewards as assessments.

    <task family> <session>            AGENT   session start .. last event (late feedback included)
      turn 1                           CHAIN   a user message (a sub-agent: its task) .. the next one
        model call 1 (v3)              LLM     policy version, token counts, sampling params, texts
        tool edit                      TOOL    arguments -> output; an error status when broken or failed
        sub-agent searcher             AGENT   created .. finished (the orchestrator's trace)
      outcome                          UNKNOWN what the product reported
      feedback thumbs_down             EVALUATOR  feedback that arrived later
    assessments: reward.<component> (CODE, the reward library), feedback.<kind> (HUMAN, the product's users)

Texts come from the session's events (already redacted by ingest) or, with a tokenizer, from the model calls'
token ids; every text goes through liverl.redaction again, since decoded tokens never did.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from liverl.io.traces import (
    POLICY_VERSION_TAG_PREFIX,
    TAG_AGENT_ROLE,
    TAG_BATCH,
    TAG_POLICY_VERSIONS,
    TAG_SESSION,
    TAG_TABLE_VERSION,
    TAG_TASK_FAMILY,
    TAG_TENANT,
    TAG_TRAJECTORY,
    AssessmentRecord,
    SpanRecord,
    TraceRecord,
)
from liverl.rewards.session import SessionRecord
from liverl.v1.session_event_pb2 import FeedbackKind
from pipelines.roles import agent_of

ROOT = "session"
SESSION_WIDE = {"session_start", "session_end", "outcome", "feedback"}  # shown in every agent's trace
# feedback kinds that are verdicts; the others carry a number in `value`
VERDICTS = {FeedbackKind.FEEDBACK_KIND_THUMBS_UP: True, FeedbackKind.FEEDBACK_KIND_THUMBS_DOWN: False,
            FeedbackKind.FEEDBACK_KIND_EDIT_KEPT: True, FeedbackKind.FEEDBACK_KIND_EDIT_REVERTED: False,
            FeedbackKind.FEEDBACK_KIND_DISSATISFIED_FOLLOWUP: False}

Redact = Callable[[str], str]
Decode = Callable[[list[int]], str]


def build_trace(key: str, session: SessionRecord, row: dict, table_version: int | None, redact: Redact,
                decode: Decode | None = None) -> TraceRecord:
    """The trace of trajectory `row` (a committed table row) of `session`."""
    agent = row["agent_id"]
    events = [e for e in session.events if _belongs(e, agent)]
    calls = [c for c in session.model_calls if agent_of(c.agent_id) == agent]
    times = [e.event_time_ms for e in events] + [c.finish_time_ms or c.request_time_ms for c in calls]
    start_ms = row["session_start_ms"] or min(times)
    spans = [None]  # the root, filled in last: its end covers everything
    turn = ROOT
    turns = 0
    opened: dict[str, SpanRecord] = {}  # tool calls and sub-agents waiting for their end event
    previous_call_ms = 0  # the agent's previous model call: what came after it is the next call's new context
    for item in sorted([*events, *calls], key=_time):
        body = "model_call" if _is_call(item) else item.WhichOneof("body")
        if body in ("user_message", "task_assigned") and (body == "user_message" or item.agent_id != agent):
            turns += 1
            turn = f"turn-{turns}"
            spans.append(_turn(turn, turns, item, redact))
        elif body == "model_call":
            index = sum(1 for s in spans if s is not None and s.span_type == "LLM")
            spans.append(_model_call(item, turn, index, row, events, previous_call_ms, redact, decode))
            previous_call_ms = item.request_time_ms
        elif body == "tool_call":
            opened[f"tool-{item.tool_call.call_id}"] = _tool_call(item, turn, redact)
        elif body == "tool_result" and f"tool-{item.tool_result.call_id}" in opened:
            spans.append(_tool_result(opened.pop(f"tool-{item.tool_result.call_id}"), item, redact))
        elif body == "subagent_created":
            opened[f"subagent-{item.subagent_created.subagent_id}"] = SpanRecord(
                f"subagent-{item.subagent_created.subagent_id}",
                f"sub-agent {item.subagent_created.name or item.subagent_created.subagent_id}", item.event_time_ms,
                item.event_time_ms, "AGENT", turn, inputs={"subagent_id": item.subagent_created.subagent_id})
        elif body == "subagent_finished" and f"subagent-{item.subagent_finished.subagent_id}" in opened:
            done = item.subagent_finished
            span = opened.pop(f"subagent-{done.subagent_id}")
            spans.append(_ended(span, item.event_time_ms, {"task_id": done.task_id, "success": done.success,
                                                            "steps": done.steps},
                                None if done.success else "the sub-agent did not finish its task"))
        elif body == "outcome":
            spans.append(SpanRecord(f"outcome-{item.event_id}", "outcome", item.event_time_ms, item.event_time_ms,
                                    "UNKNOWN", ROOT, outputs=_outcome(item, redact)))
        elif body == "feedback":
            spans.append(_feedback_span(item, redact))
    spans += opened.values()  # never ended: shown as instants where they began
    spans = [s for s in spans if s is not None]
    spans = _close_turns(spans)
    end_ms = max([row["session_end_ms"] or 0, *times, *(s.end_ms for s in spans)])
    first_user = next((e.user_message.text for e in events if e.WhichOneof("body") == "user_message"), "")
    outcome = next((_outcome(e, redact) for e in events if e.WhichOneof("body") == "outcome"), None)
    root = SpanRecord(ROOT, _trace_name(row), start_ms, end_ms, "AGENT",
                      inputs={"task_family": row["task_family"], "task_id": row["task_id"],
                              "request": redact(first_user)},
                      outputs={"outcome": outcome, "end": _end_reason(events)},
                      attributes=_root_attributes(row))
    feedback = [e for e in events if e.WhichOneof("body") == "feedback"]
    return TraceRecord(
        key=key, name=_trace_name(row), spans=[root, *spans],
        tags=_tags(row, table_version),
        metadata={"mlflow.trace.session": row["session_id"]},
        assessments=_reward_assessments(row) + [_feedback_assessment(e, spans, redact) for e in feedback],
        request_preview=redact(first_user), response_preview=json.dumps(outcome) if outcome else "")


def _belongs(event, agent: str) -> bool:
    body = event.WhichOneof("body")
    if body in SESSION_WIDE:
        return True
    if body == "task_assigned":  # the orchestrator's assignment opens the sub-agent's turn
        return agent_of(event.agent_id) == agent or event.task_assigned.subagent_id == agent
    return agent_of(event.agent_id) == agent


def _is_call(item) -> bool:
    return item.DESCRIPTOR.name == "ModelCall"


def _time(item) -> tuple[int, int, int]:
    """Timeline order; in one millisecond, events (the user message that prompts a call) before calls."""
    return (item.request_time_ms, 1, 0) if _is_call(item) else (item.event_time_ms, 0, int(item.sequence))


def _turn(key: str, number: int, event, redact: Redact) -> SpanRecord:
    if event.WhichOneof("body") == "task_assigned":
        task = event.task_assigned
        inputs = {"task": redact(task.description), "task_id": task.task_id, "stage": task.stage}
    else:
        inputs = {"user": redact(event.user_message.text), "follow_up": event.user_message.follow_up}
    return SpanRecord(key, f"turn {number}", event.event_time_ms, event.event_time_ms, "CHAIN", ROOT, inputs=inputs)


def _model_call(call, parent: str, index: int, row: dict, events: list, previous_call_ms: int, redact: Redact,
                decode: Decode | None) -> SpanRecord:
    prompt, completion = list(call.prompt_token_ids), list(call.completion_token_ids)
    start, end = _span_bounds(row, index)
    new_context = _new_context(prompt, completion, start, end)
    produced = [e for e in events if e.WhichOneof("body") in ("tool_call", "summary")
                and getattr(e, e.WhichOneof("body")).request_id == call.request_id]
    outputs: dict = {"completion_tokens": len(completion)}
    inputs: dict = {"prompt_tokens": len(prompt), "new_context_tokens": len(new_context)}
    if decode is not None:
        inputs["new_context"] = redact(decode(new_context))
        outputs["completion"] = redact(decode(completion))
    else:  # the texts the session recorded around this call
        inputs["context"] = [_event_text(e, redact) for e in events
                             if e.WhichOneof("body") in ("user_message", "tool_result", "task_assigned")
                             and previous_call_ms <= e.event_time_ms <= call.request_time_ms]
    outputs |= {"tool_calls": [_event_text(e, redact) for e in produced if e.WhichOneof("body") == "tool_call"]}
    summaries = [redact(e.summary.text) for e in produced if e.WhichOneof("body") == "summary"]
    if summaries:
        outputs["summary"] = summaries[0]
    sampling = call.sampling
    attributes = {
        "liverl.policy_version": call.policy_version, "liverl.request_id": call.request_id,
        "liverl.api": call.api, "liverl.finish_reason": call.finish_reason,
        "liverl.behaviour_logprob_sum": round(sum(call.completion_logprobs), 6),
        "liverl.trainable_tokens": sum(row["loss_mask"][start:end]) if start is not None else 0,
        "liverl.sampling": {"temperature": round(sampling.temperature, 6), "top_p": round(sampling.top_p, 6),
                            "top_k": sampling.top_k, "max_tokens": sampling.max_tokens, "seed": sampling.seed,
                            "stop": list(sampling.stop)} if call.HasField("sampling") else None,
        "mlflow.llm.model": call.model_name,
        "mlflow.chat.tokenUsage": {"input_tokens": len(prompt), "output_tokens": len(completion),
                                   "total_tokens": len(prompt) + len(completion)},
    }
    return SpanRecord(f"call-{call.request_id or call.event_id}", f"model call {index + 1} (v{call.policy_version})",
                      call.request_time_ms, call.finish_time_ms or call.request_time_ms, "LLM", parent,
                      inputs=inputs, outputs=outputs, attributes=attributes)


def _new_context(prompt: list[int], completion: list[int], start: int | None, end: int | None) -> list[int]:
    """What a call added to the chain before its completion: the tail of its own prompt (the chain so far is
    its prompt's head, or a new segment starts with the whole prompt). Taken from the call, not the row: the row's
    token ids are sealed (liverl/privacy/row_sealing.py) and a trace needs none of them."""
    if start is None:
        return prompt
    added = max(0, min(len(prompt), end - start - len(completion)))
    return prompt[len(prompt) - added:]


def _span_bounds(row: dict, index: int) -> tuple[int | None, int | None]:
    """[start, end) of model call `index` in the row's token arrays (the table keeps calls in request order)."""
    starts, ends = row["span_starts"] or [], row["span_ends"] or []
    return (starts[index], ends[index]) if index < len(starts) else (None, None)


def _tool_call(event, parent: str, redact: Redact) -> SpanRecord:
    tool = event.tool_call
    return SpanRecord(f"tool-{tool.call_id}", f"tool {tool.name or '?'}", event.event_time_ms, event.event_time_ms,
                      "TOOL", parent, inputs={"arguments": redact(tool.arguments_json)},
                      attributes={"liverl.call_id": tool.call_id, "liverl.request_id": tool.request_id,
                                  "liverl.valid": tool.valid},
                      error=None if tool.valid else f"broken tool call: {redact(tool.error) or 'invalid'}")


def _tool_result(span: SpanRecord, event, redact: Redact) -> SpanRecord:
    result = event.tool_result
    outputs = {"output": redact(result.output), "is_error": result.is_error}
    if result.chunk_ids:
        outputs["chunk_ids"] = list(result.chunk_ids)
    return _ended(span, event.event_time_ms, outputs, span.error or ("the tool failed" if result.is_error else None))


def _ended(span: SpanRecord, end_ms: int, outputs, error: str | None) -> SpanRecord:
    return SpanRecord(span.key, span.name, span.start_ms, max(end_ms, span.start_ms), span.span_type, span.parent,
                      span.inputs, outputs, span.attributes, error)


def _close_turns(spans: list[SpanRecord]) -> list[SpanRecord]:
    """Each turn ends where its last child ends (at least where the next turn begins)."""
    ends: dict[str, int] = {}
    for span in spans:
        if span.parent and span.parent.startswith("turn-"):
            ends[span.parent] = max(ends.get(span.parent, 0), span.end_ms)
    return [_ended(s, max(ends.get(s.key, s.end_ms), s.end_ms), s.outputs, s.error) if s.key.startswith("turn-")
            else s for s in spans]


def _outcome(event, redact: Redact) -> dict:
    outcome = event.outcome
    found = {"success": outcome.success, "score": outcome.score}
    if outcome.detail:
        found["detail"] = redact(outcome.detail)
    if outcome.metrics:
        found["metrics"] = dict(outcome.metrics)
    return found


def _feedback_span(event, redact: Redact) -> SpanRecord:
    feedback = event.feedback
    return SpanRecord(f"feedback-{event.event_id}", f"feedback {_kind(feedback.kind)}", event.event_time_ms,
                      event.event_time_ms, "EVALUATOR", ROOT,
                      inputs={"target_call_id": feedback.target_call_id} if feedback.target_call_id else None,
                      outputs={"kind": _kind(feedback.kind), "value": feedback.value,
                               "comment": redact(feedback.comment)})


def _feedback_assessment(event, spans: list[SpanRecord], redact: Redact) -> AssessmentRecord:
    feedback = event.feedback
    target = f"tool-{feedback.target_call_id}"
    return AssessmentRecord(
        name=f"feedback.{_kind(feedback.kind)}", value=VERDICTS.get(feedback.kind, float(feedback.value)),
        source_type="HUMAN", source_id=redact(event.user_id) or event.tenant_id,
        rationale=redact(feedback.comment) or None, time_ms=event.event_time_ms,
        metadata={"event_id": event.event_id},
        span=target if feedback.target_call_id and any(s.key == target for s in spans) else None)


def _reward_assessments(row: dict) -> list[AssessmentRecord]:
    """Each raw reward component, as the reward library labelled it (the trainer mixes them later)."""
    version = row["reward_config_version"] or ""
    return [AssessmentRecord(f"reward.{name}", float(value), "CODE", f"liverl.rewards/{version}",
                             metadata={"reward_config_version": version})
            for name, value in sorted(row["reward_components"] or ())]


def _event_text(event, redact: Redact) -> str:
    body = event.WhichOneof("body")
    if body == "user_message":
        return "user: " + redact(event.user_message.text)
    if body == "tool_result":
        return f"tool result {event.tool_result.call_id}: " + redact(event.tool_result.output)
    if body == "tool_call":
        return f"{event.tool_call.name}({redact(event.tool_call.arguments_json)})"
    if body == "task_assigned":
        return "task: " + redact(event.task_assigned.description)
    return body or ""


def _end_reason(events: list) -> str | None:
    return next((e.session_end.reason for e in events if e.WhichOneof("body") == "session_end"), None)


def _kind(kind: int) -> str:
    return FeedbackKind.Name(kind).removeprefix("FEEDBACK_KIND_").lower()


def _trace_name(row: dict) -> str:
    name = f"{row['task_family'] or 'session'} {row['session_id']}"
    return name if row["agent_role"] == "single" else f"{name} / {row['agent_role']} {row['agent_id']}"


def _root_attributes(row: dict) -> dict:
    return {"liverl.trajectory_id": row["trajectory_id"], "liverl.agent_id": row["agent_id"],
            "liverl.agent_role": row["agent_role"], "liverl.parent_agent_id": row["parent_agent_id"],
            "liverl.tokens": len(row["loss_mask"]), "liverl.trainable_tokens": sum(row["loss_mask"]),
            "liverl.segments": len(row["segment_starts"] or []) or 1,
            "liverl.critical_steps": row["critical_steps"], "liverl.num_turns": row["num_turns"],
            "liverl.signals": dict(row["signals"] or ())}


def _tags(row: dict, table_version: int | None) -> dict[str, str]:
    versions = list(row["policy_versions"] or [])
    return {TAG_TENANT: row["tenant_id"], TAG_SESSION: row["session_id"], TAG_TRAJECTORY: row["trajectory_id"],
            TAG_AGENT_ROLE: row["agent_role"], TAG_TASK_FAMILY: row["task_family"] or "",
            TAG_BATCH: row["batch_id"], TAG_TABLE_VERSION: "" if table_version is None else str(table_version),
            TAG_POLICY_VERSIONS: ",".join(versions),
            **{POLICY_VERSION_TAG_PREFIX + version: "true" for version in versions}}
