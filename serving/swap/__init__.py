"""How a served group brings a version in: the rollout that follows one registry alias per group (rollout, groups,
alias_watcher) with probation, canary and rollback; the ways a version arrives (in_place, adapter_swap, a second
engine); the fleet rule (fleet, update_lease); loading and checking a version (version_loader, weight_check,
downloads); and what a swap reports (result)."""
