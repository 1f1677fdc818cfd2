"""The small infrastructure library every stage uses the same way (and no stage re-implements).

- `spool`: one durable on-disk spool (framed, checksummed, fsync'd; corrupt frames quarantined).
- `processes`: start detached processes, wait for readiness, stop them by PID; free ports.

Clients only: nothing here knows what a stage does with what it reads or writes.
"""
