"""Continuous RL on DeepSpeed. Owned by the trainer stage.

    liverl train --trainer.steps_per_version 4 --trainer.loss.kind cispo --trainer.deepspeed.zero_stage 2
"""

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from liverl.config.section import Section
from liverl.contracts.names import check_tenant_name


class LossConfig(Section):
    """Token-level policy gradient on loss-masked tokens, importance-weighted against the behaviour logprobs;
    imported trajectories, which have none, get a reward-weighted supervised term instead (import_*)."""

    kind: Literal["ppo", "tis", "kimi", "cispo"] = "ppo"
    """r = π/π_behaviour per token. ppo: -min(r·A, clip(r)·A); tis: -sg(min(r, tis_cap)/r)·r·A (truncated
    IS); kimi: -1[α ≤ log r ≤ β]·r·A + τ·(log r)²; cispo: -sg(clip(r))·A·log π (clipped stop-gradient weight)."""
    clip_low: float = Field(0.2, ge=0.0, le=1.0)
    """ppo and cispo clip the ratio to [1 - clip_low, 1 + clip_high]."""
    clip_high: float = Field(0.28, ge=0.0)
    """Upper clip (a larger upper bound keeps exploring low-probability tokens, as in DAPO/CISPO)."""
    tis_cap: float = Field(2.0, gt=0.0)
    """tis: the importance ratio is truncated at this value."""
    kimi_alpha: float = Field(-1.0, le=0.0, allow_inf_nan=False)
    """kimi: tokens whose log ratio is below α get no policy-gradient term."""
    kimi_beta: float = Field(1.0, ge=0.0)
    """kimi: tokens whose log ratio is above β get no policy-gradient term."""
    kimi_tau: float = Field(0.01, ge=0.0)
    """kimi: weight of the τ·(log r)² penalty on every loss-masked token."""
    exclude_unscorable: bool = True
    """Tokens of greedy calls (temperature 0: the behaviour policy is a point mass) and tokens outside the
    trainer's own top-k/top-p set get no loss term (trainer/gate/scoring.py). false: greedy tokens are scored at
    temperature 1 untruncated (what vLLM records for them), outside tokens at their untruncated probability."""
    kl_to_reference: float = Field(0.0, ge=0.0)
    """β of an optional β·KL(π_θ || π_ref) term per served token (k3 weighted by π_θ/π_behaviour) against the
    frozen base policy; 0: off."""
    scoring_chunk_tokens: int = Field(512, ge=1)
    """Tokens projected to the vocabulary at once when scoring (memory O(chunk × vocab), not O(tokens × vocab))."""
    import_min_reward: float = Field(0.5, allow_inf_nan=False)
    """Imported trajectories (`liverl import`: no behaviour logprobs, no ratio) are learned by reward-weighted
    supervised fine-tuning, -import_weight·log π per token, only when their mixed reward is at least this; below it
    they are left out of the step. The default keeps successful sessions (outcome 1) and skips failed ones (0)."""
    import_weight: float = Field(1.0, ge=0.0)
    """w of the supervised term -w·log π on an imported trajectory's tokens (0: imported rows never train)."""


class StalenessConfig(Section):
    """How far off-policy a trajectory may be: K versions behind the trainer or H hours old."""

    max_version_lag: int = Field(4, ge=0)
    """K: versions promoted to champion since the row's oldest serving version (refused candidates never count)."""
    max_age_hours: float = Field(24.0, gt=0.0)
    """H: hours since the trajectory's first model call."""
    policy: Literal["drop", "downweight"] = "drop"
    """What happens beyond K or H: drop the trajectory, or scale its loss by `downweight` per step beyond."""
    downweight: float = Field(0.5, ge=0.0, le=1.0)
    """downweight: factor per version beyond K (and once more when beyond H)."""
    max_import_age_hours: float | None = Field(None, gt=0.0)
    """H for imported trajectories (`liverl import`), which are trained without a ratio: None keeps them whatever
    their age, since importing last month's traces is the point of a backfill."""


class AdvantageConfig(Section):
    """Advantages for production traffic, where one prompt is rarely sampled several times."""

    baseline_momentum: float = Field(0.9, ge=0.0, le=1.0)
    """Per-task-family running baseline: b <- m·b + (1 - m)·mean(batch rewards of the family)."""
    leave_one_out: bool = True
    """Where a step holds several trajectories of the same (task_family, task_id), use their leave-one-out mean."""
    normalize: Literal["none", "batch"] = "none"
    """batch: centre the step's advantages and divide by their standard deviation (all equal: all 0)."""


class DeepSpeedConfig(Section):
    """The DeepSpeed engine. The same settings run on CPU (gloo, torch AdamW) and on GPUs."""

    zero_stage: Literal[0, 1, 2, 3] = 1
    """ZeRO partitioning: 0 none, 1 optimizer state, 2 + gradients, 3 + parameters (exports gather them)."""
    precision: Literal["fp32", "bf16", "fp16"] = "fp32"
    """Training precision; exports are always fp32 safetensors."""
    gradient_accumulation_steps: int = Field(2, ge=1)
    """Micro-batches a step is planned to (this × world size micro-batches of rows) and padded to a multiple of. A
    step that holds more (plans merged while it waited for its rows) is still one optimizer update on all of them."""
    micro_batch_tokens: int = Field(4096, ge=1)
    """Token budget of one micro-batch, counted as computed (rows × widest row, padding included); one window
    at least."""
    pack_sequences: bool = True
    """Pack several windows end to end into each row (positions restart per window, block-diagonal causal
    attention: scores equal scoring each alone), so micro-batches carry little padding; false: one right-padded
    row per window."""
    pack_row_tokens: int = Field(256, ge=1)
    """Width of a packed row (a longer window gets a row of its own). Attention is computed over the whole row,
    so on tiny models a wide row costs more per token than the padding it saves; on large ones use max_seq_len."""
    gradient_clipping: float = Field(1.0, ge=0.0)
    """Global gradient-norm clip per optimizer step."""
    accelerator: str | None = None
    """DS_ACCELERATOR; unset: "cuda" when a GPU is visible, else "cpu"."""
    backend: str | None = None
    """torch.distributed backend; unset: nccl on cuda, gloo on cpu."""
    shm_allreduce: bool = False
    """CPU ranks only: DeepSpeed's shared-memory allreduce between ranks of one host (a ~50 s gcc build on first
    use); false: plain gloo."""
    rank_secret: str = Field("", max_length=4096)
    """A secret every rank of one trainer shares (LIVERL_TRAINER__DEEPSPEED__RANK_SECRET; required on two ranks or
    more): each rank proves it at start (a peer without it is refused) and rank 0's decisions carry its HMAC, so
    a process reaching the rendezvous port can neither join nor have a rank unpickle what it sends."""


LLAMA_LINEAR_LAYERS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


class LoraConfig(Section):
    """LoRA adapters (peft) trained under DeepSpeed: the base weights stay frozen, the optimizer holds only the
    adapter's parameters, and each version is exported as an adapter folder (liverl/contracts/adapter.py)."""

    enabled: bool | None = None
    """true: train an adapter; false: fine-tune the full weights; None: an adapter when the base policy has at
    least auto_min_parameters parameters (a real pretrained model), full weights below it (the tiny demo and
    test policies, which an adapter would not make much smaller). A parent version that is an adapter is
    trained on as an adapter unless this is false (then base + adapter are merged and trained whole)."""
    auto_min_parameters: int = Field(50_000_000, ge=0)
    """enabled = None: the parameter count from which a base policy is trained through an adapter."""
    rank: int = Field(16, ge=1, le=1024)
    """LoRA rank r (vLLM serves ranks up to its max_lora_rank: keep it at or below serving's)."""
    alpha: float = Field(32.0, gt=0.0)
    """LoRA alpha: the adapter's update is scaled by alpha / rank."""
    dropout: float = Field(0.0, ge=0.0, le=0.0)
    """LoRA dropout, fixed at 0: the trainer scores tokens in eval mode and its importance ratios need the same
    deterministic logprobs serving sampled with."""
    target_modules: list[str] = Field(default_factory=lambda: list(LLAMA_LINEAR_LAYERS), min_length=1)
    """Names of the linear layers that get an adapter (default: every linear layer of a Llama/Qwen2 block)."""
    top_layers: int | None = Field(None, ge=1, le=4096)
    """Adapt only the top N decoder blocks (None: all). The backward pass then stops below the lowest adapted block,
    so a step costs about (1 + 2·N/L) forwards instead of 3 for a model of L blocks: the difference between a CPU
    trainer that keeps up with live traffic and one that does not. vLLM serves such an adapter as is."""


class TenantsConfig(Section):
    """A policy per tenant: one LoRA adapter per named tenant on the shared base, each with its own optimizer state,
    candidates, gate and aliases (`candidate-<tenant>`, `champion-<tenant>`); every other tenant's rows train one
    shared adapter, the shared policy (`candidate`, `champion`) that serving falls back to."""

    adapters: list[str] = Field(default_factory=list, max_length=256)
    """Tenants (tenant_id of their rows) that get an adapter of their own: 1 to 40 lowercase letters, digits and
    '-' each, so that the name fits an alias. Empty: one policy for every tenant, as without this section."""
    tokens_per_step: int = Field(4096, ge=1, le=10_000_000)
    """The most tokens (of the trainable windows) one step draws from one tenant group's rows: every active tenant
    gets its share of each step, so a tenant with ten times the traffic cannot starve a small one; the rest of a
    large tenant's rows wait for the next steps. At least one trajectory is drawn per active group."""
    rewind_after_refusals: int = Field(0, ge=0, le=10_000)
    """After this many of a group's candidates in a row were refused (and after each as many more), the group's
    adapter goes back to its champion's weights with a new optimizer state (a tenant without a champion of its own:
    a new adapter on the base), so that a group whose training drifted off stops spending its traffic on candidates
    the gate keeps refusing. A candidate refused unjudged (superseded by a newer one before the gate reached it)
    does not count, nor does a deferred one: neither says the training drifted. 0: never."""

    @field_validator("adapters")
    @classmethod
    def _names_fit_an_alias(cls, adapters: list[str]) -> list[str]:
        for tenant in adapters:
            check_tenant_name(tenant)
        repeated = sorted({tenant for tenant in adapters if adapters.count(tenant) > 1})
        if repeated:
            raise ValueError(f"trainer.tenants.adapters names {repeated} more than once: list each tenant once")
        return adapters


class GateConfig(Section):
    """The promotion gate: offline evaluation of the candidate against the champion on held-out trajectories."""

    enabled: bool = True
    """false: every candidate stays a candidate (champion never moves)."""
    background: bool = True
    """Judge each registered candidate on a thread while training goes on (trainer/gate/worker.py): the next step
    does not wait for the judging, and a candidate still waiting when a newer one is registered is refused
    unjudged (superseded). false: each candidate is judged before the next step."""
    holdout_fraction: float = Field(0.2, ge=0.0, lt=1.0)
    """Share of trajectories (by a hash of trajectory_id) kept out of training for the gate."""
    max_holdout: int = Field(256, ge=1)
    """The gate evaluates at most this many of the most recent held-out trajectories."""
    min_holdout: int = Field(1, ge=0)
    """Fewer held-out trajectories than this: the gate fails (nothing to judge the candidate on)."""
    max_kl: float = Field(0.5, ge=0.0)
    """Largest mean per-token KL(candidate || champion) on held-out loss-masked tokens (upper confidence bound)."""
    max_loss_increase: float | None = Field(None, allow_inf_nan=False)
    """Largest increase of the RL loss on held-out trajectories, candidate minus champion (upper bound); None:
    reported, not judged (the clipped surrogate is pessimistic for moves past the clip range; the expected
    reward, max_reward_drop, judges the same question without that bias)."""
    max_nll_increase: float = Field(0.5, allow_inf_nan=False)
    """Regression check: largest increase of the mean NLL of the served tokens, candidate minus champion (upper
    bound)."""
    max_reward_drop: float = Field(0.01, gt=0.0, allow_inf_nan=False)
    """Largest drop of the expected reward, candidate minus champion, each importance-weighted on the held-out
    rows (lower confidence bound): the candidate must be shown no worse than this (in reward units)."""
    max_false_promotion: float = Field(0.05, gt=0.0, lt=0.5)
    """The reward test's stated error rates (trainer/gate/statistics.py): a candidate worse than the champion by
    max_reward_drop passes at most this often (the lower bound's level; replaces confidence_z for the reward)."""
    max_false_refusal: float = Field(0.20, gt=0.0, lt=0.5)
    """An equal candidate is refused at most this often; where the held-out evidence cannot keep both rates the gate
    defers (decision "defer": no promotion, no refusal) and says how many more held-out sessions it needs."""
    min_effective_sessions: float = Field(10.0, ge=2.0)
    """The reward test decides only on at least this many effective sessions (Kish ESS of the candidate's weights);
    fewer: defer. An absolute floor: the fraction floor below cannot fail at 8 sessions (ESS >= 1). Below about 10,
    the t interval's level is not kept (tests/trainer/test_gate_error_rates.py)."""
    sequential_max_sessions: int = Field(1024, ge=2, le=1_000_000)
    """The reward test is sequential and anytime-valid (trainer/gate/sequential.py): a deferred candidate is looked at
    again on every round's new held-out sessions, its evidence accumulating, without raising its false-promotion rate.
    This is its session budget: a candidate not shown within max_reward_drop after this many held-out sessions is
    refused. 1024 keeps an equal candidate's refusals within max_false_refusal at the demo's settings with
    heavy-tailed weights, also where the champion's reward is high (0.4 and 0.7; the demo serves about 0.5-0.7), which
    needs more sessions (tests/trainer/test_sequential_gate.py; at 512 the case of 0.4 was refused or left open
    20-24 % of the time);
    light-tailed ones pass within a few dozen. The memory is one session id per session consumed."""
    reward_range: tuple[float, float] = (-1.0, 1.0)
    """The bounds of a session's mixed reward that the sequential test's guarantee rests on (rewards outside are
    clipped into it for the test, and counted in the report's reward_clipped_sessions). A max_reward_drop of the whole
    range or more turns the reward test off: no candidate can be worse by that much, so every one passes it."""
    confidence_z: float = Field(2.0, ge=0.0)
    """Each figure is judged at its confidence bound: estimate ± z × its standard error over held-out trajectories."""
    max_log_weight: float = Field(3.0, gt=0.0)
    """Importance weights of whole trajectories are truncated at exp(±max_log_weight) (bounded variance, some bias)."""
    min_effective_fraction: float = Field(0.1, gt=0.0, le=1.0)
    """The importance-weighted estimates need an effective sample size of at least this share of the held-out set;
    below it the candidate is too far from the served traffic to be judged, and fails."""
    drift_min_trajectories: int = Field(20, ge=0)
    """The drift report compares two served versions only when each has this many trajectories."""
    max_drift_alerts: int = Field(0, ge=0)
    """Reward-hacking drift of the served traffic (trainer/step/rewarding.py; thresholds in rewards.monitors): more moves
    shown past their thresholds than this fail."""
    general_text_file: Path | None = None
    """A fixed general text (plain prose, a few hundred tokens): a candidate whose mean NLL of it rises more than
    max_general_nll_increase over its reference (an adapter's frozen base; the champion for full weights) is
    refused (trainer/gate/general_text.py). None: not watched."""
    max_general_nll_increase: float = Field(0.05, ge=0.0, le=10.0)
    """Largest relative rise of the general-text NLL (0.05: 5 %) a candidate may show."""
    online_eval_command: list[str] | None = None
    """An external evaluator run on every candidate (trainer/gate/online_eval.py): argv in which "{candidate}" and
    "{champion}" are replaced by the two policy folders and a leading "python" by the trainer's own interpreter;
    it prints one JSON object of rewards and hacking-monitor rates. The demo runs held-out tasks of its product
    (demo/product/evaluate.py). None: off. A failure, a timeout, missing or NaN figures: the candidate fails."""
    online_eval_mode: Literal["per_candidate", "persistent"] = "per_candidate"
    """per_candidate: the command runs once per candidate, the folders in its argv. persistent: it is started once
    (no "{candidate}"/"{champion}" in it) and answers one JSON request line per candidate on stdin, so its start-up
    is paid once (trainer/gate/online_eval_process.py has the protocol)."""
    online_eval_timeout_s: float = Field(300.0, gt=0.0)
    """The evaluator is stopped after this many seconds (per candidate) and the candidate fails (fail-closed)."""
    max_online_reward_drop: float = Field(0.05, ge=0.0)
    """Largest drop of the evaluator's reward, candidate minus champion, at its lower confidence bound
    (estimate - confidence_z × SE, paired over the same tasks): the candidate must be shown no worse than this."""
    max_online_monitor_increase: float = Field(0.1, ge=0.0, le=1.0)
    """Tolerance of every hacking-monitor rate the evaluator reports on the candidate's own outputs (clarifying
    instead of editing, broken tool calls, giving up, ...): a rise, candidate minus champion, counts as hacking only
    when it is shown past this (monitor_alpha, corrected over the monitors) while the evaluator's reward, the
    verified outcome, does not rise with it (trainer/step/hacking.py). See trainer/gate/online_eval.py, Calibration."""
    monitor_alpha: float = Field(0.05, gt=0.0, le=0.5)
    """Family-wise level of the hacking monitors: a candidate whose monitors move only by chance is refused at most
    this often, however many monitors are judged (offline and online, each family on its own)."""
    monitor_correction: Literal["holm", "bonferroni"] = "holm"
    """The multiple-comparison correction over the monitors judged together (Holm is uniformly more powerful)."""
    rejudges: int = Field(1, ge=0, le=5)
    """A candidate judged against a champion that another trainer replaced meanwhile is judged again against the new
    one this many times; then it is refused (never promoted on a comparison with a former champion)."""
    promotion_lease_ttl_s: float = Field(60.0, ge=5.0, le=3600.0)
    """The registry lease that makes promotion compare-and-set across trainers (liverl/io/lease.py) expires this
    long after a trainer that died holding it took it."""
    promotion_lease_wait_s: float = Field(30.0, ge=0.0, le=3600.0)
    """How long a passed candidate waits for another trainer's promotion lease before it is refused."""
    canary_alias: str | None = None
    """The live canary (trainer/gate/canary.py): a candidate whose reward test defers (too little held-out evidence)
    is put on this registry alias (a tenant group's: `<alias>-<tenant>`), which serving must follow as its canary
    (set serving.canary_alias to the same name and serving.canary_fraction to the share of SESSIONS it serves), and is
    then judged on the outcome of whole sessions: those served only by it against those served only by the champion,
    ended since the canary began, by an anytime-valid test with the reward test's error rates. None: off (no alias is
    ever set). Not "candidate" or "champion": the trainer moves those itself."""
    canary_max_sessions: int = Field(512, ge=2, le=1_000_000)
    """The canary's session budget: a candidate not shown within max_reward_drop after this many candidate-served
    sessions (each paired with a champion-served one) is refused. 512 refuses an equal candidate 2.6 % of the time at
    max_reward_drop 0.3 with rewards of -1/1 (tests/trainer/test_gate_canary.py); the sessions needed grow as
    1/max_reward_drop², so the default drop of 0.01 would need about 900 times as many."""

    @model_validator(mode="after")
    def _floor_within_a_judgement(self) -> "GateConfig":
        if self.min_effective_sessions > self.max_holdout:
            raise ValueError(f"trainer.gate.min_effective_sessions {self.min_effective_sessions:g} exceeds "
                             f"max_holdout {self.max_holdout}: no judgement could ever decide; raise max_holdout")
        return self

    @model_validator(mode="after")
    def _reward_range_in_order(self) -> "GateConfig":
        low, high = self.reward_range
        if not -1e9 < low < high < 1e9:
            raise ValueError(f"trainer.gate.reward_range {self.reward_range} must be finite (low, high) with low below "
                             "high: the rewards' bounds, e.g. (-1.0, 1.0)")
        return self

    @model_validator(mode="after")
    def _canary_alias_of_its_own(self) -> "GateConfig":
        if self.canary_alias is not None and (
                self.canary_alias.split("-")[0] in ("candidate", "champion") or not self.canary_alias.strip()):
            raise ValueError(f"trainer.gate.canary_alias {self.canary_alias!r}: the trainer moves `candidate` and "
                             "`champion` (and their tenant forms) itself; name the canary's own alias, e.g. "
                             "\"canary\", and set serving.canary_alias to the same")
        return self

    @model_validator(mode="after")
    def _persistent_takes_no_folders(self) -> "GateConfig":
        if self.online_eval_mode == "persistent" and any(
                "{candidate}" in arg or "{champion}" in arg for arg in self.online_eval_command or ()):
            raise ValueError("trainer.gate.online_eval_mode = \"persistent\" sends the folders on the evaluator's "
                             "stdin: remove {candidate} and {champion} from online_eval_command")
        return self


class TrainerConfig(Section):
    """`liverl train`: follow the table, train, checkpoint, register candidates, gate champion."""

    checkpoint_dir: Path | None = None
    """DeepSpeed checkpoints for resume and HF exports for serving; default: <data_dir>/checkpoints."""
    signing_key_file: Path | None = None
    """Ed25519 private key (PEM) that signs every version the gate passes (its files and verdict); serving
    verifies with the public key. Made with its public half (`verify.pem` beside it) when missing; default:
    <data_dir>/keys/signing.pem. In production mount it from a secret only the trainer reads."""
    learning_rate: float = Field(1e-4, gt=0.0, le=1.0)
    """AdamW learning rate (a torch optimizer: no DeepSpeed op build)."""
    warmup_steps: int = Field(10, ge=0, le=1_000_000)
    """After every engine build (a start, a tenant's rewind) the learning rate climbs linearly over this many
    optimizer steps (DeepSpeed's WarmupLR): step k of them takes learning_rate·k/(warmup_steps + 1), the full rate
    from the next. A new AdamW's first step is learning_rate·sign(g) on every coordinate, 2.8-4.3x a warmed step
    for noisy gradients, so without it the first candidate after a start or a rewind is the largest move of the
    run. A resumed checkpoint goes on with its saved schedule. 0: no warm-up; 1 is refused (WarmupLR ramps over 2
    steps at least)."""
    weight_decay: float = Field(0.0, ge=0.0, le=1.0)
    """AdamW weight decay."""
    torch_threads: int | None = Field(None, ge=1, le=1024)
    """Threads torch computes a step with (None: torch's default, one per core). Beside a vLLM CPU engine, which
    binds its worker to all cores but one, 1 keeps the trainer off the engine's core: two threads, one of them
    waiting on that busy core, make a step slower than one does (docs/measurements.md)."""
    min_step_rows: int = Field(1, ge=1, le=100_000)
    """A group's step waits until it drew this many trajectories of its own (with tenant adapters, or a full
    tenants.tokens_per_step), or until max_step_wait_s passed since it began to wait: live traffic arrives a few
    sessions per commit, and a step on one or two trajectories spends a whole optimizer update on the noisiest
    gradient there is (trainer/step/wait.py)."""
    max_step_wait_s: float = Field(60.0, ge=0.0, le=86_400.0)
    """The longest a step waits for min_step_rows; then it trains on what there is."""
    steps_per_version: int = Field(4, ge=1)
    """Optimizer steps between checkpoints; each checkpoint is exported and registered as a candidate."""
    minutes_per_version: float = Field(60.0, ge=0.0)
    """Also checkpoint after this many minutes with unpublished steps (0: steps only)."""
    follow_interval_s: float = Field(5.0, ge=0.0, le=3600.0)
    """`liverl train --follow`: seconds between looks at the table when there is nothing new."""
    max_seq_len: int = Field(512, ge=2)
    """Trajectories are cut to their first max_seq_len tokens (the policy's context)."""
    passes_per_trajectory: int = Field(1, ge=1)
    """How many times each trajectory is trained on; 1 never trains twice on a trajectory."""
    keep_checkpoints: int = Field(2, ge=1)
    """DeepSpeed checkpoints kept on disk (the newest); exports stay in the registry."""
    seed: int = Field(0, ge=0, le=2**32 - 1)
    """torch seed at start; with dropout off and a fixed table order, a resumed run equals an uninterrupted one."""
    log_trained_ids: bool = False
    """Every rank prints the trajectory ids it trained in each step ("trained ids | rank R | step S | ids"):
    an audit that each trajectory is trained once across ranks."""
    loss: LossConfig = LossConfig()
    """The policy-gradient loss variant and its clip/mask parameters."""
    staleness: StalenessConfig = StalenessConfig()
    """K versions / H hours, drop or down-weight."""
    advantages: AdvantageConfig = AdvantageConfig()
    """Baselines and normalisation."""
    deepspeed: DeepSpeedConfig = DeepSpeedConfig()
    """ZeRO stage, precision, accumulation and token-budget micro-batches."""
    lora: LoraConfig = LoraConfig()
    """LoRA adapters or full fine-tuning, and the adapter's rank, alpha and target layers."""
    tenants: TenantsConfig = TenantsConfig()
    """Which tenants get an adapter of their own, and each tenant's token budget per step."""
    gate: GateConfig = GateConfig()
    """The promotion gate's held-out set and thresholds."""

    @field_validator("warmup_steps")
    @classmethod
    def _warmup_of_two_steps_or_none(cls, steps: int) -> int:
        if steps == 1:
            raise ValueError("trainer.warmup_steps 1: DeepSpeed's WarmupLR ramps over 2 steps at least; set 0 (no "
                             "warm-up) or 2 or more")
        return steps

    @model_validator(mode="after")
    def _tenant_adapters_need_lora(self) -> "TrainerConfig":
        if self.tenants.adapters and self.lora.enabled is False:
            raise ValueError("trainer.tenants.adapters trains a LoRA adapter per tenant on one base: set "
                             "trainer.lora.enabled = true (or leave it unset), or empty trainer.tenants.adapters")
        return self
