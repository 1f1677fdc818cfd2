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
Roles come from pipelines/roles.py (headers and spawn graph); an agent whose role cannot be inferred is a
dead letter, never a trainable agent. Rows are the contract's typed TrajectoryRow.
"""

from __future__ import annotations

import math

import hashlib
import json

import apache_beam as beam

from liverl.config.rewards import RewardsConfig
from liverl.contracts import names
from liverl.contracts.table_schema import TABLE_SCHEMA_VERSION
from liverl.contracts.trajectory_row import TrajectoryRow
from liverl.rewards import label as reward_label
from liverl.rewards.session import SessionRecord
from pipelines import dead_letters
from pipelines.roles import TRAINABLE_ROLES, UNKNOWN, Spawn, agent_of, infer_roles, spawn_graph
from pipelines.sessionize import summarize

DEAD = "dead"

# What a span's sampling columns hold when its ModelCall carries no sampling parameters: a NaN temperature
# ("unknown", so the trainer leaves its tokens unscorable instead of guessing temperature 1, untruncated).
UNKNOWN_SAMPLING = (float("nan"), 1.0, 0)


def trajectory_id(tenant_id: str, session_id: str, agent_id: str) -> str:
    """Deterministic, so a re-run of the same session yields the same id."""
    # a JSON list, not "a|b|c": a tenant or session id containing the separator can never collide
    return hashlib.sha256(json.dumps([tenant_id, session_id, agent_id]).encode()).hexdigest()[:32]


def check_session(session: SessionRecord) -> tuple[str, str] | None:
    """(reason, message) when the session's model calls cannot be turned into token sequences."""
    # Imported calls (`liverl import`) carry no behaviour logprobs by definition: nothing to align.
    mismatched = [c.request_id or c.event_id for c in session.model_calls
                  if not is_imported(c) and len(c.completion_logprobs) != len(c.completion_token_ids)]
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
    temperatures, top_ps, top_ks = [], [], []
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
        sampled = trainable and not is_imported(call)  # an imported call has no behaviour logprobs: 0, never used
        logprobs += [0.0] * len(delta) + (list(call.completion_logprobs) if sampled else [0.0] * len(completion))
        span_ends.append(len(tokens))
        span_versions.append(call.policy_version)
        temperature, top_p, top_k = span_sampling(call) or UNKNOWN_SAMPLING
        temperatures.append(temperature)
        top_ps.append(top_p)
        top_ks.append(top_k)
        context = prompt + completion
    known = any(span_sampling(call) for call in calls)
    return {"token_ids": tokens, "loss_mask": mask, "behaviour_logprobs": logprobs, "span_starts": span_starts,
            "span_ends": span_ends, "span_policy_versions": span_versions, "segment_starts": segment_starts,
            "policy_versions": list(dict.fromkeys(span_versions)),
            # all unknown: leave the columns empty, which the table also reads as "unknown"
            "span_temperature": temperatures if known else [], "span_top_p": top_ps if known else [],
            "span_top_k": top_ks if known else []}


def is_imported(call) -> bool:
    return call.origin.startswith("import:")


def row_origin(calls) -> str:
    """"" for served trajectories; the import's origin when any call was imported (the trainer then never forms
    an importance ratio on the row: see trainer/step/losses.py)."""
    return next((call.origin for call in calls if is_imported(call)), "")


def span_sampling(call) -> tuple[float, float, int] | None:
    """(temperature, top_p, top_k) the call was sampled with, or None when the ModelCall does not say.

    proto3 cannot tell an unset float from 0, so the producer's guarantee decides (serving/generation.py):
    serving always sets `sampling`, writes temperature explicitly (1.0 by default, 0.0 only for a greedy
    request), keeps top_p in (0, 1] and top_k >= 0 (0: disabled). Hence: no `sampling` field, or a top_p of 0
    (which serving never writes), means "not recorded"; otherwise temperature 0 really is greedy. A call whose
    logprobs serving could not record exactly (NaN: an upstream vLLM server that did not return them, docs/upstream.md)
    is not recorded either: its tokens are left unscorable, never trained as if on-policy.
    """
    if not call.HasField("sampling") or call.sampling.top_p <= 0.0:
        return None
    if any(math.isnan(logprob) for logprob in call.completion_logprobs):
        return None
    sampling = call.sampling
    return float(sampling.temperature), float(sampling.top_p), max(int(sampling.top_k), 0)  # -1 also disables


def label_agents(session: SessionRecord, agent_ids: list[str], rewards: RewardsConfig, judge=None,
                 label_fn=reward_label) -> dict:
    """agent id -> RewardLabel, or the exception the reward library raised for that agent.

    Without a judge: liverl.rewards.label per agent (the reward library). With the judge enabled: the library's
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
               judge=None, label_fn=reward_label) -> tuple[list[TrajectoryRow], list[dict]]:
    """(trajectory rows, dead letters) of one ready session."""
    problem = check_session(session)
    if problem:
        reason, message = problem
        return [], [dead_letters.session_dead_letter(reason, message, session.tenant_id, session.session_id,
                                                     summarize(session))]
    by_agent: dict[str, list] = {}
    for call in session.model_calls:
        by_agent.setdefault(agent_of(call.agent_id), []).append(call)
    roles = infer_roles(session, list(by_agent))
    dead = [dead_letters.session_dead_letter(
        dead_letters.UNKNOWN_AGENT_ROLE,
        f"agent {agent_id!r} has no role header and no spawn event names it: it is not trained; send "
        f"{names.META_AGENT_ROLE} or record SubAgentCreated/TaskAssigned for it",
        session.tenant_id, session.session_id, summarize(session) | {"agent_id": agent_id}, agent_id)
        for agent_id, role in roles.items() if role is UNKNOWN]
    known = [agent_id for agent_id in by_agent if roles[agent_id] is not UNKNOWN]
    labels = label_agents(session, known, rewards, judge, label_fn)
    graph = spawn_graph(session)
    rows = []
    for agent_id in known:
        label = labels[agent_id]
        if isinstance(label, Exception):
            dead.append(dead_letters.session_dead_letter(
                dead_letters.LABEL_FAILED, f"reward library failed for agent {agent_id}: {label!r}",
                session.tenant_id, session.session_id, summarize(session) | {"agent_id": agent_id}, agent_id))
            continue
        try:
            rows.append(trajectory_row(session, agent_id, roles[agent_id], graph.get(agent_id), by_agent[agent_id],
                                       label, rewards, batch_id, distilled_at_ms).validate())
        except ValueError as error:  # e.g. a non-finite reward component: never committed, kept for replay
            dead.append(dead_letters.session_dead_letter(
                dead_letters.INVALID_ROW, str(error), session.tenant_id, session.session_id,
                summarize(session) | {"agent_id": agent_id}, agent_id))
    return rows, dead


def trajectory_row(session: SessionRecord, agent_id: str, role: str, spawn: Spawn | None, calls: list, label,
                   rewards: RewardsConfig, batch_id: str, distilled_at_ms: int) -> TrajectoryRow:
    """One agent's trajectory; times the producers left unset (proto3 0) are None, never 0."""
    start_event = next(e for e in session.events if e.WhichOneof("body") == "session_start")
    end_event = next((e for e in session.events if e.WhichOneof("body") == "session_end"), None)
    signals = {k: float(v) for k, v in label.signals.items()}
    if spawn is not None and spawn.stage is not None:
        signals["spawn_stage"] = float(spawn.stage)
    served = [c.request_time_ms for c in calls if c.request_time_ms > 0]
    start_ms = start_event.event_time_ms or (min(served) if served else 0)
    return TrajectoryRow(
        trajectory_id=trajectory_id(session.tenant_id, session.session_id, agent_id),
        session_id=session.session_id,
        tenant_id=session.tenant_id,
        task_family=start_event.session_start.task_family,
        task_id=start_event.session_start.task_id,
        agent_role=role,
        agent_id=agent_id,
        parent_agent_id=spawn.parent if spawn is not None else None,
        **chain_tokens(calls, trainable=role in TRAINABLE_ROLES),
        reward_components={k: float(v) for k, v in label.components.items()},
        reward_config_version=label.config_version or rewards.version,
        signals=signals,
        critical_steps=int(label.critical_steps),
        num_turns=sum(1 for e in session.events if e.WhichOneof("body") == "user_message"),
        num_model_calls=len(calls),
        session_start_ms=start_event.event_time_ms or None,
        session_end_ms=(end_event.event_time_ms or None) if end_event else None,
        first_served_ms=min(served) if served else None,
        distilled_at_ms=distilled_at_ms,
        batch_id=batch_id,
        schema_version=TABLE_SCHEMA_VERSION,
        event_date=dead_letters.utc_date(start_ms),
        origin=row_origin(calls),
    )


class BuildTrajectories(beam.DoFn):
    """SessionRecord -> TrajectoryRows; tagged DEAD: sessions (or agents) that cannot be rebuilt."""

    def __init__(self, rewards: RewardsConfig, batch_id: str, distilled_at_ms: int):
        self._rewards = rewards
        self._batch_id = batch_id
        self._distilled_at_ms = distilled_at_ms
        self.trajectories = beam.metrics.Metrics.counter("distill", "trajectories")
        # rewards.custom calls that failed (raised, timed out): each also flags its row (signal custom.failed)
        self.custom_failures = beam.metrics.Metrics.counter("distill", "custom_reward_failures")
        self._judge = None

    def setup(self):
        from liverl.rewards.custom import resolve_all

        resolve_all(self._rewards)  # a custom reward that does not import fails the job here, saying which
        if self._rewards.judge.enabled:  # the reward library's only I/O: one client per worker
            from liverl.rewards.judge import Judge

            self._judge = Judge(self._rewards.judge)

    def process(self, session: SessionRecord):
        rows, dead = build_rows(session, self._rewards, self._batch_id, self._distilled_at_ms, self._judge)
        for row in rows:
            self.trajectories.inc()
            self.custom_failures.inc(int(row.signals.get("custom.failed", 0)))
            yield row
        for letter in dead:
            yield beam.pvalue.TaggedOutput(DEAD, letter)

    def teardown(self):
        if self._judge is not None:
            self._judge.close()

