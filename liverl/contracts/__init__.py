"""Contracts the stages agree on, beside the generated wire types (`liverl.v1`) and the config (`liverl.config`).

- `names`: schema versions, Kafka headers, gRPC metadata keys, registry aliases, lineage tags, commit metadata.
- `table_schema`: the trajectory and dead-letter tables' Arrow schemas, versioned.
- `trajectory_row`: the typed trajectory row the pipelines write and the trainer reads.
- `refused_request`: the dead-letter payload of a request ingest or serving refused whole.

Only data and its shape live here: no I/O, no clients, nothing a single stage alone needs.
"""
