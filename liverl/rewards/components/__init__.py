"""Reward components: each module is a versioned, pure function AgentView x RewardsConfig -> Part.

Sign convention (every module): a component is a signed contribution to the reward. Credits are in
[0, 1], penalties in [-1, 0] (already negative), so a mixing weight is always a plain positive scale.
A component is absent when its evidence is absent (no outcome event: no "outcome"), which is not the
same as 0 (an outcome that failed). Signals are the raw counts behind them, for the monitors.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Part:
    """What one component group contributes to a RewardLabel."""

    components: dict[str, float] = field(default_factory=dict)
    signals: dict[str, float] = field(default_factory=dict)
