"""The small infrastructure library every stage uses the same way (and no stage re-implements).

- `spool`: one durable on-disk spool (framed, checksummed, fsync'd; corrupt frames quarantined).
- `kafka_writer`: an idempotent producer in front of the spool: acks=all or spooled, replayed in order
  when Kafka is back (at-least-once; consumers dedupe on event id).
- `backoff`: one exponential backoff with jitter for every retry loop.
- `processes`: start detached processes, wait for readiness, stop them by PID; free ports.
- `tracking`: the MLflow server: one client per URI, experiments and runs, and the error rule
  (RESOURCE_DOES_NOT_EXIST is an answer; anything else raises `RegistryUnavailable`).
- `registry`: the model registry with one set of alias semantics: aliases, version tags, register a
  policy folder as a version, download a version, list versions.
- `lineage`: the lineage codec: a version's `Lineage` to registry tags and back; Kafka offset ranges.
- `table_history`: the trajectory table's commits (batch id, Kafka offsets), their rows, snapshots.
- `traces`: trajectories as MLflow traces (written once, idempotently) and the searches that find them,
  e.g. the training data of a registered version.
- `lease`: a registry-held lease with an owner and an expiry (the serving fleet's rolling swap, the trainers'
  promotion).
- `signing`: signed weights: the digest of a version's files and its gate verdict, signed by the trainer's
  Ed25519 key and verified by serving with the public one.

Clients only: nothing here knows what a stage does with what it reads or writes.
"""
