"""The trajectory table: one row per trajectory, written by the pipelines, read by the trainer.

Defined once, here, and versioned. Rows hold *raw* reward components: the trainer mixes them with
weights that follow its own step (PARL's lambdas and Context-1's beta anneal with training).
Bump TABLE_SCHEMA_VERSION on any change; readers refuse versions they do not know.
"""

import pyarrow as pa

# 1: the first table. 2: per-span sampling parameters and origin (additive: version-1 rows read with them empty).
# 3: token ids sealed per data subject, subject_id and sealed_token_ids (additive: older rows read in clear).
TABLE_SCHEMA_VERSION = 3

# Per-span policy versions: a trajectory chains several model calls, possibly served by different
# versions across a hot-swap; span i covers tokens [span_starts[i], span_ends[i]).
TRAJECTORY_SCHEMA = pa.schema(
    [
        pa.field("trajectory_id", pa.string(), nullable=False),  # deterministic: same session -> same id
        pa.field("session_id", pa.string(), nullable=False),
        pa.field("tenant_id", pa.string(), nullable=False),
        pa.field("task_family", pa.string()),  # "coding" | "search" | "orchestrator" | product-defined
        pa.field("task_id", pa.string()),
        pa.field("agent_role", pa.string(), nullable=False),  # "single" | "orchestrator" | "subagent"
        pa.field("agent_id", pa.string(), nullable=False),
        pa.field("parent_agent_id", pa.string()),  # orchestrator of a sub-agent trajectory
        pa.field("policy_versions", pa.list_(pa.string())),  # distinct versions, oldest first
        pa.field("span_starts", pa.list_(pa.int32())),
        pa.field("span_ends", pa.list_(pa.int32())),
        pa.field("span_policy_versions", pa.list_(pa.string())),
        pa.field("token_ids", pa.list_(pa.int32()), nullable=False),  # (T,) the full chain; [] when sealed
        pa.field("loss_mask", pa.list_(pa.int8()), nullable=False),  # (T,) 1 only on policy-sampled tokens
        pa.field("behaviour_logprobs", pa.list_(pa.float32()), nullable=False),  # (T,) 0 where mask is 0
        pa.field("reward_components", pa.map_(pa.string(), pa.float64())),  # raw, unmixed
        pa.field("reward_config_version", pa.string()),
        pa.field("signals", pa.map_(pa.string(), pa.float64())),  # monitor counts: broken calls, turns, ...
        pa.field("critical_steps", pa.int32()),
        pa.field("num_turns", pa.int32()),
        pa.field("num_model_calls", pa.int32()),
        pa.field("session_start_ms", pa.int64()),
        pa.field("session_end_ms", pa.int64()),
        pa.field("first_served_ms", pa.int64()),  # earliest model call (freshness and staleness clocks)
        pa.field("distilled_at_ms", pa.int64()),
        pa.field("batch_id", pa.string(), nullable=False),  # the idempotency id of the committing batch
        pa.field("schema_version", pa.int32(), nullable=False),
        pa.field("event_date", pa.string(), nullable=False),  # partition column, "YYYY-MM-DD" (UTC)
        # Token offsets where a segment starts (0 first): self-summarisation rewrote the context there, so
        # each segment is scored as its own sequence; the reward still covers every segment. Additive field.
        pa.field("segment_starts", pa.list_(pa.int32())),
        # How each span's tokens were sampled (the call's SamplingParams), so the trainer scores them under the
        # same processing: temperature 0 is greedy; top_p 1 and top_k 0 are no truncation. A NaN temperature
        # or an empty column (version-1 rows): unknown, so the trainer leaves those tokens unscorable. Additive
        # fields (version 2).
        pa.field("span_temperature", pa.list_(pa.float32())),
        pa.field("span_top_p", pa.list_(pa.float32())),
        pa.field("span_top_k", pa.list_(pa.int32())),
        # "" for trajectories served by liverl; "import:<format>" when built from imported traces (`liverl
        # import`): no behaviour logprobs, so the trainer never forms an IS ratio on them (version 2).
        pa.field("origin", pa.string()),
        # The token ids are the user's text, exact: the pipelines seal them (liverl/privacy/row_sealing.py) under
        # the key of the row's data subject, the keyed pseudonym of its session ("s-<hex>": not personal data),
        # the same subject and key its Kafka records were sealed with; `liverl forget` deletes that key, so every
        # copy of the row's files (history, backups) becomes unreadable. token_ids is then empty; the trainer
        # opens the row. Null: token_ids are in clear (older rows, privacy.encrypt_payloads off). Version 3.
        pa.field("subject_id", pa.string()),
        pa.field("sealed_token_ids", pa.binary()),  # version byte + 12-byte nonce + AES-256-GCM of int32 ids
    ]
)

TRAJECTORY_PARTITION_BY = ["event_date"]

# Events and sessions the pipelines could not use; never silently dropped.
DEAD_LETTER_SCHEMA = pa.schema(
    [
        pa.field("dead_letter_id", pa.string(), nullable=False),  # deterministic, so re-runs dedupe
        pa.field("reason", pa.string(), nullable=False),  # e.g. "malformed_event", "missing_model_call"
        pa.field("message", pa.string()),
        pa.field("session_id", pa.string()),
        pa.field("tenant_id", pa.string()),  # the session's tenant (from the record, or its tenant header)
        pa.field("source_topic", pa.string()),
        pa.field("source_partition", pa.int32()),
        pa.field("source_offset", pa.int64()),
        pa.field("payload", pa.binary()),  # the raw record or a JSON summary of the session
        pa.field("batch_id", pa.string(), nullable=False),
        pa.field("recorded_at_ms", pa.int64()),
        pa.field("event_date", pa.string(), nullable=False),
    ]
)
