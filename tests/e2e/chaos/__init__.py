"""Helpers of the chaos test (tests/e2e/test_chaos.py): the acknowledgement ledger in front of the capture
service, stages that can be killed and restarted by PID, the seeded kill schedule, the drain wait and the
end-to-end reconciliation of what clients were told was stored against the trajectory and dead-letter tables.
"""
