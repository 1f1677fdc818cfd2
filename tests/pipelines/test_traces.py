"""Committed trajectories as MLflow traces, on the real broker, Beam runner, Delta table and MLflow server."""

from __future__ import annotations

import pytest
from deltalake import DeltaTable

from liverl.io.traces import TAG_COMPLETE, TAG_TABLE_VERSION, TraceStore, table_versions_filter, traces_filter
from liverl.io.tracking import Tracking
from liverl.rewards.session import SessionRecord
from liverl.v1 import session_event_pb2 as se
from pipelines import table
from pipelines.audit import TRACES_FILTER_TAG, ensure_audited
from pipelines.distill import distill_once
from pipelines.trace_spans import _new_context
from pipelines.traces import log_batch_traces, sampled, trace_sources
from pipelines.trajectories import chain_tokens
from tests.pipelines import producing
from tests.pipelines.producing import T0, coding_session, event, orchestrator_session, produce

LATER = T0 + 3600_000


def _coding(session_id: str, version: str, outcome: float, email_in_request: bool = False):
    events, calls = coding_session(session_id, outcome_score=outcome)
    if email_in_request:
        events[1].user_message.text = "fix the bug, then mail bob@example.com"
    for call in calls:
        call.policy_version = version
    return events, calls


def _distill_and_trace(config, sessions) -> table.Committed:
    """One real batch with the audit on: the graph stages the sampled sessions, the commit is traced."""
    produce(config, [e for events, _ in sessions for e in events], [c for _, calls in sessions for c in calls])
    assert distill_once(config, now_ms=LATER).committed
    return table.read_committed(config.table.trajectories_uri)


def _traces(config, filter_string: str | None = None) -> list:
    import mlflow

    experiment = Tracking(config.mlflow.tracking_uri).experiment_id(config.mlflow.audit_experiment)
    return mlflow.search_traces(locations=[experiment], filter_string=filter_string, return_type="list")


def _tag(trace, key: str) -> str | None:
    return trace.info.tags.get(key)


def test_committed_trajectories_become_searchable_traces_once(distill_config, monkeypatch):
    config = distill_config.model_copy(deep=True)
    config.pipelines.audit = True
    monkeypatch.setenv("MLFLOW_TRACKING_URI", config.mlflow.tracking_uri)  # for mlflow.search_traces only
    c1 = _coding("c1", "1", 1.0, email_in_request=True)
    c1[0].insert(-1, event("c1", 7, feedback=se.Feedback(kind=se.FEEDBACK_KIND_THUMBS_DOWN, target_call_id="k1",
                                                        comment="wrong file")))
    first = _distill_and_trace(config, [c1, orchestrator_session("o1")])
    second = _distill_and_trace(config, [_coding("c2", "7", 0.1), _coding("c3", "7", 0.9)])

    rows = {(r["session_id"], r["agent_id"]): r
            for r in DeltaTable(config.table.trajectories_uri).to_pyarrow_table().to_pylist()}
    traces = {(_tag(t, "liverl.session_id"), t.data.spans[0].attributes["liverl.agent_id"]): t for t in _traces(config)}
    assert set(traces) == set(rows) == {("c1", "main"), ("o1", "main"), ("o1", "sub-1"), ("c2", "main"), ("c3", "main")}

    # tags: who, what, which batch, table version and policy versions
    for key, trace in traces.items():
        row = rows[key]
        assert _tag(trace, "liverl.tenant_id") == row["tenant_id"] and _tag(trace, "liverl.batch_id") == row["batch_id"]
        assert _tag(trace, "liverl.task_family") == row["task_family"]
        assert _tag(trace, "liverl.policy_versions") == ",".join(row["policy_versions"])
        expected_version = first.table_version if key[0] in ("c1", "o1") else second.table_version
        assert _tag(trace, TAG_TABLE_VERSION) == str(expected_version)
        assert trace.info.trace_metadata["mlflow.trace.session"] == key[0]
        rewards = {a.name: a.value for a in trace.info.assessments if a.name.startswith("reward.")}
        assert rewards == {f"reward.{name}": value for name, value in row["reward_components"]}

    # spans of c1: the session, its turn, each model call with version/tokens/sampling, the tool, outcome, feedback
    c1_trace, c1_row = traces[("c1", "main")], rows[("c1", "main")]
    spans = {span.name: span for span in c1_trace.data.spans}
    assert set(spans) == {"coding c1", "turn 1", "model call 1 (v1)", "model call 2 (v1)", "model call 3 (v1)",
                          "tool edit", "outcome", "feedback thumbs_down"}
    calls = [spans[f"model call {i} (v1)"] for i in (1, 2, 3)]
    assert [s.attributes["liverl.policy_version"] for s in calls] == c1_row["span_policy_versions"]
    assert [s.attributes["mlflow.chat.tokenUsage"]["output_tokens"] for s in calls] == [2, 1, 3]
    assert calls[0].attributes["liverl.sampling"]["temperature"] == 1.0 and calls[0].span_type == "LLM"
    assert sum(s.attributes["liverl.trainable_tokens"] for s in calls) == sum(c1_row["loss_mask"])
    assert calls[0].outputs["tool_calls"] == ["edit({})"] and calls[2].outputs["summary"] == "so far"
    assert calls[1].inputs["context"] == ["tool result k1: ok"]
    assert spans["turn 1"].inputs["user"] == "fix the bug, then mail [REDACTED:email]"  # redacted in the trace
    assert "bob@example.com" not in str([s.to_dict() for s in c1_trace.data.spans])
    assert spans["tool edit"].span_type == "TOOL" and spans["tool edit"].outputs["output"] == "ok"
    assert spans["tool edit"].parent_id == spans["turn 1"].span_id
    feedback = next(a for a in c1_trace.info.assessments if a.name == "feedback.thumbs_down")
    assert feedback.value is False and feedback.source.source_type == "HUMAN" and feedback.rationale == "wrong file"
    assert feedback.span_id == spans["tool edit"].span_id
    sub = {span.name for span in traces[("o1", "main")].data.spans}
    assert "sub-agent searcher" in sub

    # "coding sessions of version 7 with reward < 0.2"
    found = _traces(config, traces_filter(task_family="coding", policy_version="7")
                    + " AND feedback.`reward.outcome` < 0.2")
    assert [_tag(t, "liverl.session_id") for t in found] == ["c2"]

    # a registry version's link: exactly the traces of its table versions
    assert {_tag(t, "liverl.session_id") for t in _traces(config, table_versions_filter([second.table_version]))} \
        == {"c2", "c3"}
    assert len(_traces(config, table_versions_filter([first.table_version, second.table_version]))) == 5

    # re-runs: the audit again, and the trace step itself again, log nothing new
    ensure_audited(config, second)
    history_rows = [r for r in rows.values() if r["batch_id"] == second.metadata["liverl.batch_id"]]
    tracking = Tracking(config.mlflow.tracking_uri)
    assert log_batch_traces(config, second.state_uri, history_rows, second.table_version, tracking) == 2
    again = _traces(config)
    assert len(again) == 5
    assert sorted(len(t.info.assessments) for t in again) == sorted(len(t.info.assessments) for t in traces.values())

    # a trace a crash left incomplete is written again whole: its assessments merge by id, never doubled
    c2_id = traces[("c2", "main")].info.trace_id
    TraceStore(tracking).client.delete_trace_tag(c2_id, TAG_COMPLETE)
    assert log_batch_traces(config, second.state_uri, history_rows, second.table_version, tracking) == 2
    rewritten = {t.info.trace_id: t for t in _traces(config)}
    assert _tag(rewritten[c2_id], TAG_COMPLETE) == "true"
    assert len(rewritten[c2_id].info.assessments) == len(traces[("c2", "main")].info.assessments)
    assert len({a.assessment_id for a in rewritten[c2_id].info.assessments}) == len(rewritten[c2_id].info.assessments)

    run = tracking.client.search_runs([tracking.experiment_id(config.mlflow.audit_experiment)],
                                      filter_string=f"tags.`liverl.batch_id` = '{second.metadata['liverl.batch_id']}'")[0]
    assert run.data.metrics["traces"] == 2
    assert len(_traces(config, run.data.tags[TRACES_FILTER_TAG])) == 2


def test_sampling_is_deterministic_and_follows_the_rate():
    keys = [("demo", f"s{i}") for i in range(4000)]
    assert not any(sampled(t, s, 0.0) for t, s in keys) and all(sampled(t, s, 1.0) for t, s in keys)
    share = sum(sampled(t, s, 0.25) for t, s in keys) / len(keys)
    assert share == pytest.approx(0.25, abs=0.03)
    assert [sampled(t, s, 0.25) for t, s in keys] == [sampled(t, s, 0.25) for t, s in keys]
    events, calls = coding_session("x")
    record = SessionRecord("x", "demo", tuple(events), tuple(calls))
    assert list(trace_sources(record, 0.0)) == []
    (staged,) = trace_sources(record, 1.0)
    assert len(staged["events"]) == len(events) and len(staged["model_calls"]) == len(calls)


def test_a_calls_new_context_comes_from_its_prompt_as_the_row_chained_it():
    call = producing.call
    calls = [call("s", 0, "r1", [1, 2], [3]), call("s", 1, "r2", [1, 2, 3, 7, 8], [9, 10]),
             call("s", 2, "r3", [5, 6], [7]), call("s", 3, "r4", [5, 6, 7], [8])]  # r3 starts a segment; r4 adds none
    chain = chain_tokens(calls, trainable=True)
    for index, c in enumerate(calls):
        start, end = chain["span_starts"][index], chain["span_ends"][index]
        completion = list(c.completion_token_ids)
        assert _new_context(list(c.prompt_token_ids), completion, start, end) == \
            chain["token_ids"][start:end - len(completion)]  # what the sealed row's ids would have given
