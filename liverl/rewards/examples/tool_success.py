"""An example `rewards.custom` function: how often the agent's tool calls worked (docs/rewards.md).

    [rewards.custom.tool_success]
    function = "liverl.rewards.examples.tool_success:tool_success"
    components = ["rate"]

A team's own scorer has the same shape: it reads the AgentView the built-in components read (the agent's tool
calls with their results, model calls, user messages, feedback and outcome: liverl/rewards/view.py) and returns
named numbers inside the entry's bounds ([-1, 1] by default). It is called once per trajectory, in the
pipelines' workers, so it must be deterministic and quick (timeout_s), and it must not call back into liverl.
"""

from __future__ import annotations

from liverl.rewards.view import AgentView


def tool_success(view: AgentView, *, count_missing_results: bool = True) -> dict[str, float]:
    """{"rate": share of this agent's tool calls that were valid and whose result is not an error}, in [0, 1].

    No tool calls: no evidence, so "rate" is absent (not 0), as the built-in components do. A call whose result
    never came back (the session ended first) counts as failed unless count_missing_results is false.
    """
    uses = [use for use in view.tool_uses if use.result is not None or count_missing_results]
    if not uses:
        return {}
    worked = sum(1 for use in uses if use.call.valid and use.result is not None and not use.result.is_error)
    return {"rate": worked / len(uses)}
