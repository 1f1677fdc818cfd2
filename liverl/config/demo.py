"""The demo agent product and the whole-loop run of `liverl demo`."""

from typing import Literal

from pydantic import Field

from liverl.config.demo_run import DemoRunConfig
from liverl.config.section import Section

TaskFamily = Literal["coding", "search", "orchestrator"]


class DemoConfig(Section):
    duration_s: float = Field(600.0, gt=0)
    """How long `liverl demo` runs the loop."""
    seed: int = 0
    """Seeds the base policy's fit, the tasks and the simulated users."""
    tenant_id: str = "demo"
    """The tenant the demo product records as (its token is run.capture_token)."""
    families: list[TaskFamily] = ["coding", "search", "orchestrator"]
    """Task families the product serves, in turn: a coding edit, a budgeted search, an orchestrator."""
    subagents_call_policy: bool = True
    """Whether the orchestrator's frozen sub-agents call the policy (role "subagent") or are only scripted."""
    temperature: float = Field(1.0, gt=0)
    """Sampling temperature the product requests; 1.0 keeps behaviour logprobs equal to the model's."""
    max_new_tokens: int = Field(8, ge=1)
    """Longest tool call in tokens (the grammar's longest call plus <eos> is 8)."""
    policy_timeout_s: float = Field(30.0, gt=0)
    """Deadline of one Generate call to serving."""
    run: DemoRunConfig = DemoRunConfig()
    """How `liverl demo` runs the loop (load, feedback delay, timeouts, tokens)."""
