"""What serving records: every completion as a ModelCall (recorder, handoff), the session it belongs to
(session_ids, stitching of header-less calls, tenant_lru), and which user a session belongs to (subjects)."""
