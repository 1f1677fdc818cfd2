"""Example reward functions for `rewards.custom` (docs/rewards.md): small, documented, and tested end to end."""
