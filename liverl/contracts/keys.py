"""The Kafka key of every record that belongs to a session, on every topic (docs/architecture.md, contract 1).

A session's identity is (tenant, session): the key carries both, so one session keeps its order in one
partition and equal session ids of two tenants never share a key. Tenant ids cannot hold "/" (ingest and
serving refuse such tenants), so no two (tenant, session) pairs share a key.
"""


def session_key(tenant_id: str, session_id: str) -> bytes:
    if "/" in tenant_id:
        raise ValueError(f"tenant id {tenant_id!r} holds '/': tenant ids are names without '/'")
    return f"{tenant_id}/{session_id}".encode("utf-8")
