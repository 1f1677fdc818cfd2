"""The reward library's configuration: components by name and weight, versioned. Owned by rewards.

Two halves, used at two different times:
- labelling (pipelines, `liverl.rewards.label`): tool names, penalty parameters, the judge. They decide
  the raw components written to the table, so changing them means bumping `version`.
- mixing (trainer, `liverl.rewards.mix`): weights and step schedules. They follow the trainer's step
  and may change without relabelling (the table keeps raw components).
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from liverl.config.section import Section

# Every component `label` may write (liverl/rewards/labeling.py documents each one). Weights must name
# one of these, so a typo in a weight fails at load time instead of silently weighting nothing.
KNOWN_COMPONENTS = (
    "outcome", "edit_kept", "edit_reverted", "dissatisfied_followup", "feedback", "latency",
    "broken_tool_calls", "repeated_tool_calls", "clarifying_instead_of_acting", "give_up",
    "turn_penalty", "prune_penalty",
    "parl.r_perf", "parl.r_parallel", "parl.r_finish",
    "search.precision", "search.recall", "search.traj_recall", "search.answer_found", "search.budget_violation",
    "judge",
)

DEFAULT_WEIGHTS = {
    "outcome": 1.0, "edit_kept": 0.5, "edit_reverted": 0.5, "dissatisfied_followup": 0.5, "feedback": 0.5,
    "latency": 0.1, "broken_tool_calls": 1.0, "repeated_tool_calls": 0.5, "clarifying_instead_of_acting": 1.0,
    "give_up": 1.0, "turn_penalty": 1.0, "prune_penalty": 1.0, "search.budget_violation": 1.0, "judge": 0.5,
}


class ToolNamesConfig(Section):
    """Which tool names mean what. Products name their tools differently; the reward logic should not care."""

    edit: list[str] = ["edit", "write_file", "apply_patch"]
    """Tools that change the user's files: an edit made, and the state change that ends a repeat streak."""
    clarify: list[str] = ["ask_user", "clarify"]
    """Tools that ask the user a question instead of acting."""
    reply: list[str] = ["reply", "respond", "final_answer"]
    """Tools that carry the agent's message to the user; a last reply ending in '?' counts as a question."""
    reply_text_keys: list[str] = ["text", "message", "content", "answer"]
    """Keys of a reply tool's JSON arguments that hold the text (the first present wins)."""
    search: list[str] = ["search"]
    """Retrieval tools: their ToolResult.chunk_ids are the retrieved chunks (Context-1)."""
    prune: list[str] = ["prune_chunks"]
    """Context pruning tools (Context-1); the only tools allowed past the hard token cutoff."""
    prune_ids_key: str = "chunk_ids"
    """Key of a prune call's JSON arguments listing the chunk ids it drops from the context."""
    give_up: list[str] = ["give_up", "abort"]
    """Tools by which an agent declares it stops without solving the task."""
    act: list[str] = []
    """Further tools that count as acting (besides edit, search and task assignment), e.g. "run_tests"."""


class ProductionConfig(Section):
    """Cursor-style real-time signals."""

    edit_kept_min_age_s: float = Field(0.0, ge=0.0)
    """An EDIT_KEPT feedback counts only if it came at least this long after the edit it targets.
    The product already waits before sending it; raise this to enforce a minimum here too."""
    dissatisfied_patterns: list[str] = [
        r"\b(still|again)\b.*\b(broken|wrong|fail\w*|error)\b", r"\bdoes(n't| not) work\b",
        r"\bnot what i (asked|wanted|meant)\b", r"\b(undo|revert)\b", r"\bthat'?s wrong\b", r"\bwhy did you\b",
    ]
    """Regexes (case-insensitive) that mark a follow-up user message as dissatisfied."""
    latency_target_ms: float = Field(2000.0, ge=0.0)
    """Mean model-call latency at or under this costs nothing."""
    latency_limit_ms: float = Field(30000.0, gt=0.0)
    """Mean latency at or over this gives the full latency penalty (-1); linear in between."""

    @model_validator(mode="after")
    def _limit_above_target(self) -> "ProductionConfig":
        if self.latency_limit_ms <= self.latency_target_ms:
            raise ValueError(f"rewards.production.latency_limit_ms ({self.latency_limit_ms:g}) must be above "
                             f"latency_target_ms ({self.latency_target_ms:g}): the penalty grows between the two")
        return self


class PenaltyConfig(Section):
    """Penalties from hacks observed in the seeds."""

    per_broken_call: float = Field(0.25, ge=0.0)
    """Penalty per invalid tool call (ToolCall.valid false); they are negatives, never discarded."""
    broken_cap: float = Field(1.0, ge=0.0)
    """Largest total broken-call penalty of one trajectory."""
    count_tool_errors_as_broken: bool = False
    """Also count ToolResult.is_error as broken (off: a tool failing is not always the agent's fault)."""
    per_repeated_call: float = Field(0.2, ge=0.0)
    """Penalty per tool call identical to an earlier one with no edit in between (a loop)."""
    repeated_cap: float = Field(1.0, ge=0.0)
    """Largest total repeated-call penalty of one trajectory."""
    clarify_penalty: float = Field(1.0, ge=0.0)
    """Penalty when the agent asked the user instead of acting (no edit, search or assignment at all)."""
    give_up_penalty: float = Field(1.0, ge=0.0)
    """Penalty for giving up early: a give-up tool or end reason, or a failed task after few turns."""
    give_up_end_reasons: list[str] = ["gave_up", "give_up"]
    """SessionEnd reasons that mean the agent gave up."""
    give_up_max_turns: int = Field(2, ge=0)
    """A failed outcome after at most this many turns of the agent counts as giving up early."""
    turn_penalty_start: int = Field(64, ge=0)
    """Context-1 turn penalty: 0 at this many turns ..."""
    turn_penalty_end: int = Field(128, ge=0)
    """... rising linearly to turn_penalty_max at this many turns (and capped there)."""
    turn_penalty_max: float = Field(0.5, ge=0.0)
    """The turn penalty's ceiling, reached at turn_penalty_end turns."""
    prune_free_streak: int = Field(3, ge=0)
    """Context-1 prune penalty: prune calls in a row up to this many are free ..."""
    per_extra_prune: float = Field(0.1, ge=0.0)
    """... each further one in the same streak costs this ..."""
    prune_cap: float = Field(0.5, ge=0.0)
    """... capped at this over the trajectory."""
    count_summaries_as_turns: bool = False
    """Self-summarisation calls (Summary.request_id) are not turns by default: summarising is not stalling."""

    @model_validator(mode="after")
    def _turn_penalty_rises(self) -> "PenaltyConfig":
        if self.turn_penalty_end < self.turn_penalty_start:
            raise ValueError(f"rewards.penalties.turn_penalty_end ({self.turn_penalty_end}) is below turn_penalty_start "
                             f"({self.turn_penalty_start}): the penalty rises from start to end, swap them")
        return self


class ScheduleConfig(Section):
    """A value that moves from `start` to `end` between start_step and end_step, then stays at `end`."""

    shape: Literal["linear", "cosine", "constant"] = "linear"
    """How the value moves between the two steps ("constant": it stays at `start`)."""
    start: float = Field(1.0, allow_inf_nan=False)
    """The value up to start_step."""
    end: float = Field(0.0, allow_inf_nan=False)
    """The value from end_step on."""
    start_step: int = Field(0, ge=0)
    """The trainer step at which the value starts to move."""
    end_step: int = Field(1000, ge=0)
    """The trainer step at which it reaches `end`."""

    @model_validator(mode="after")
    def _steps_in_order(self) -> "ScheduleConfig":
        if self.end_step < self.start_step:
            raise ValueError(f"schedule end_step {self.end_step} is before start_step {self.start_step}; swap them")
        return self


class ParlConfig(Section):
    """Kimi K2.5 PARL for orchestrator sessions: r = lambda1*r_parallel + lambda2*r_finish + r_perf."""

    families: list[str] = ["orchestrator"]
    """Task families labelled with PARL components (also any agent that created sub-agents)."""
    parallel_target: int = Field(4, ge=1)
    """r_parallel = min(1, sub-agents that received a task / parallel_target)."""
    critical_steps_budget: int = Field(0, ge=0)
    """0: none. Over it, a trajectory gets the signal critical_steps_over_budget=1 (monitored per version);
    critical_steps itself is stored on every row, so the trainer can also budget or filter on it."""
    lambda1: ScheduleConfig = ScheduleConfig(start=0.3, end=0.0, end_step=1000)
    """Weight of r_parallel, annealed to 0 so the orchestrator ends up optimising the task alone."""
    lambda2: ScheduleConfig = ScheduleConfig(start=0.3, end=0.0, end_step=1000)
    """Weight of r_finish, annealed to 0 likewise."""


class Context1Config(Section):
    """Chroma Context-1 for search sessions:
    r = clamp(0.7*F_beta + 0.3*r_traj + r_fa - p_prune - p_turn, eps, r_pre) (applied in liverl/rewards/mixing.py)."""

    families: list[str] = ["search"]
    """Task families labelled with search components (also any session whose Outcome lists gold chunks)."""
    f_weight: float = Field(0.7, ge=0.0)
    """Weight of F_beta, the final retrieved set's score against the gold chunks."""
    traj_weight: float = Field(0.3, ge=0.0)
    """Weight of r_traj, the recall of everything retrieved along the trajectory."""
    answer_bonus: float = Field(1.0, ge=0.0)
    """r_fa: added when a chunk holding the answer is in the final retrieved set."""
    epsilon: float = Field(0.01, ge=0.0)
    """Floor of the clamp: penalties never push a trajectory with some retrieval credit to 0."""
    beta: ScheduleConfig = ScheduleConfig(start=4.0, end=2.0, end_step=1000)
    """F_beta's beta, annealed by the trainer (recall-heavy first, then more precision)."""
    hard_cutoff_fraction: float = Field(1.0, gt=0.0)
    """Past token_budget * this (context tokens at the call), only prune tools are allowed."""
    per_budget_violation: float = Field(0.25, ge=0.0)
    """Penalty per non-prune tool call past the hard cutoff (capped at 1)."""


class ToggleConfig(Section):
    """Kimi's Toggle, optional: every other block of `period_steps` steps, credit needs a short enough answer."""

    enabled: bool = False
    """Apply the token budgets in every other block of steps."""
    period_steps: int = Field(100, ge=1)
    """Blocks alternate: steps [0, m) free, [m, 2m) budgeted, ..."""
    budget_tokens: dict[str, int] = {}
    """Per task family policy-token budget; families not listed use default_budget_tokens."""
    default_budget_tokens: int = Field(4096, ge=1)
    """The policy-token budget of a family budget_tokens does not list."""


class JudgeConfig(Section):
    """A generative reward model reached through an OpenAI-compatible chat endpoint (serving's or any)."""

    enabled: bool = False
    """Score each trajectory with the judge (the "judge" component); off: no judge calls."""
    base_url: str = "http://127.0.0.1:8000/v1"
    """OpenAI-compatible API root; /chat/completions is appended."""
    model: str = "judge"
    """Model name sent in each request."""
    api_key: str | None = None
    """Sent as 'Authorization: Bearer ...' when set."""
    headers: dict[str, str] = {}
    """Extra request headers, e.g. {"x-liverl-agent-role": "subagent"} when the judge is liverl's own serving,
    so its calls are recorded as frozen (never trained on)."""
    rubrics: dict[str, str] = {
        "task_completion": "Did the agent accomplish what the user asked, fully and correctly?",
        "honest_effort": "Did the agent act on the task (edit, search, delegate) rather than stall, "
                         "ask needless questions or give up?",
        "tool_hygiene": "Were the agent's tool calls well-formed, purposeful and free of pointless repetition?",
    }
    """Name -> question. Several are averaged so hacking one rubric does not pay."""
    min_rubrics: int = Field(2, ge=1)
    """Fewer successfully scored rubrics than this leaves the trajectory unjudged."""
    timeout_s: float = Field(30.0, gt=0.0)
    """Per request (connect, read, write, pool)."""
    batch_timeout_s: float = Field(300.0, gt=0.0)
    """A whole judge_many call: requests still running then leave their trajectories unjudged."""
    max_retries: int = Field(1, ge=0, le=10)
    """Retries of one request, with exponential backoff and jitter (the openai client's): connection errors,
    timeouts, 408, 409, 429 and 5xx only; an unparsable reply is asked again only when temperature > 0."""
    max_concurrency: int = Field(8, ge=1, le=1024)
    """Requests in flight at once within one batch."""
    max_transcript_chars: int = Field(12000, ge=1)
    """The rendered session is cut (keeping its end) to this many characters."""
    cache_size: int = Field(100000, ge=0)
    """Judgements kept in memory, keyed by a hash of model, rubric and transcript."""
    temperature: float = Field(0.0, ge=0.0, le=2.0)
    """Sampling temperature of the judge's replies (0: the same transcript is judged the same way)."""


class CustomRewardConfig(Section):
    """A team's own reward function, called on every trajectory beside the built-in components (docs/rewards.md)."""

    function: str
    """Import path "package.module:function" of a callable (view: liverl.rewards.view.AgentView, **kwargs) ->
    mapping of component name -> float. Imported by the pipelines' workers, so it must be installed there."""
    components: list[str] = Field(min_length=1)
    """The names it may return. Stored as "custom.<entry>.<name>", the name `weights`, `family_weights` and monitor
    thresholds use; a name it returns that is not listed fails the call (a typo never lands as a new component)."""
    kwargs: dict[str, Any] = {}
    """Keyword arguments passed on every call (e.g. a threshold); part of the reward version."""
    bounds: tuple[float, float] = (-1.0, 1.0)
    """Each returned value must lie in [low, high]: like the built-ins' [-1, 1], so a weight means the same scale."""
    out_of_bounds: Literal["clip", "fail"] = "clip"
    """A value outside `bounds`: "clip" it and count it (signal custom.<entry>.clipped), or "fail" the call."""
    timeout_s: float = Field(5.0, gt=0.0)
    """Per call (one trajectory). A call past it is abandoned and flagged, never waited for: labelling goes on."""

    @field_validator("function")
    @classmethod
    def _import_path(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*", value):
            raise ValueError(f"rewards.custom function {value!r} is not an import path: write \"package.module:function\"")
        return value

    @model_validator(mode="after")
    def _bounds_in_order(self) -> "CustomRewardConfig":
        low, high = self.bounds
        if not low <= high:
            raise ValueError(f"rewards.custom bounds {list(self.bounds)} must be [low, high] with low <= high")
        return self


class DriftThreshold(Section):
    """When a monitored figure's move from champion to candidate is flagged."""

    direction: Literal["up", "down", "both"] = "up"
    """Which moves are suspicious: "up" for hack rates, "down" for rewards, "both" for shape figures."""
    max_abs: float | None = Field(None, ge=0.0)
    """Flag when |candidate - champion| in that direction exceeds this."""
    max_rel: float | None = Field(None, ge=0.0)
    """Flag when the move exceeds this fraction of the champion's figure."""


class MonitorsConfig(Section):
    """Hacking monitors per policy version and the drift report the promotion gate reads."""

    min_trajectories: int = Field(5, ge=0)
    """A candidate with fewer (effective) trajectories than this gets an 'insufficient_data' flag; the promotion gate
    defers on fewer effective held-out trajectories. Below 5, Holm's smallest level (monitor_alpha / ~10 monitors)
    needs a t statistic past 4.6 on 4 degrees of freedom: a monitor could hardly ever show a move, so the check
    would pass by having no power rather than by showing no hacking."""
    thresholds: dict[str, DriftThreshold] = {
        "rate.broken_tool_calls": DriftThreshold(direction="up", max_abs=0.05),
        "rate.clarifying": DriftThreshold(direction="up", max_abs=0.05),
        "rate.give_up": DriftThreshold(direction="up", max_abs=0.05),
        "rate.repeated_tool_calls": DriftThreshold(direction="up", max_abs=0.05),
        "rate.prune_streaks": DriftThreshold(direction="up", max_abs=0.05),
        "rate.budget_violations": DriftThreshold(direction="up", max_abs=0.05),
        "mean.edits": DriftThreshold(direction="down", max_rel=0.5),
        "mean.turns": DriftThreshold(direction="both", max_rel=0.5),
        "mean.subagents_per_task": DriftThreshold(direction="both", max_rel=0.5),
        "mean.critical_steps": DriftThreshold(direction="up", max_rel=0.5),
        "component.outcome": DriftThreshold(direction="down", max_abs=0.1),
        "rate.custom_failed": DriftThreshold(direction="up", max_abs=0.05),
    }
    """Figure name (see liverl.rewards.monitors) -> threshold; figures not listed are reported, never flagged."""


class RewardsConfig(Section):
    version: str = "rewards-v1"
    """Stored on every trajectory; bump it when a component or its labelling parameters change."""
    tools: ToolNamesConfig = ToolNamesConfig()
    """Which tool names mean edit, clarify, reply, search, prune, give up and act."""
    production: ProductionConfig = ProductionConfig()
    """Real-time product signals: kept edits, dissatisfied follow-ups, latency."""
    penalties: PenaltyConfig = PenaltyConfig()
    """Penalties for observed hacks: broken and repeated calls, clarifying, giving up, turns, prunes."""
    parl: ParlConfig = ParlConfig()
    """PARL components of orchestrator sessions."""
    context1: Context1Config = Context1Config()
    """Context-1 components of search sessions."""
    toggle: ToggleConfig = ToggleConfig()
    """Kimi's Toggle token budgets (off by default)."""
    judge: JudgeConfig = JudgeConfig()
    """The generative reward model (off by default)."""
    monitors: MonitorsConfig = MonitorsConfig()
    """Hacking monitors and the drift thresholds the promotion gate reads."""
    weights: dict[str, float] = Field(default_factory=lambda: dict(DEFAULT_WEIGHTS))
    """Mixing weight per component (values are signed: penalties are already negative). What a file or
    override sets is merged over DEFAULT_WEIGHTS, so changing one weight keeps the others. Components not
    listed weigh 0. PARL and Context-1 components are combined by their own formulas, not by these."""
    family_weights: dict[str, dict[str, float]] = Field(default_factory=lambda: {"search": {"outcome": 0.0}})
    """Per task family overrides of `weights` (search: Context-1's answer bonus already is the outcome)."""
    custom: dict[str, CustomRewardConfig] = {}
    """Entry name -> a team's own reward function (liverl/rewards/custom.py). Its components are weighted and
    monitored like the built-ins (they weigh 0 until `weights` names them); the function's import path and source
    are part of every labelled row's reward_config_version."""

    @field_validator("weights", mode="before")
    @classmethod
    def _merge_over_defaults(cls, value):
        return {**DEFAULT_WEIGHTS, **value} if isinstance(value, dict) else value

    @field_validator("custom")
    @classmethod
    def _entry_names(cls, value: dict) -> dict:
        for name in value:
            if not re.fullmatch(r"[A-Za-z0-9_-]+", name):
                raise ValueError(f"rewards.custom entry {name!r}: use letters, digits, '_' or '-' (it names components)")
        return value

    @model_validator(mode="after")
    def _weights_name_known_components(self) -> "RewardsConfig":
        known = list(KNOWN_COMPONENTS) + self.custom_components()
        named = [("weights", self.weights)] + [(f"family_weights.{f}", w) for f, w in self.family_weights.items()]
        for where, weights in named:
            unknown = sorted(set(weights) - set(known))
            if unknown:
                raise ValueError(f"rewards.{where} names unknown components {unknown}; known: {known}")
        if self.judge.min_rubrics > len(self.judge.rubrics):
            raise ValueError(f"rewards.judge.min_rubrics={self.judge.min_rubrics} exceeds the "
                             f"{len(self.judge.rubrics)} rubrics configured; lower it or add rubrics")
        return self

    def custom_components(self) -> list[str]:
        """Every component the custom functions may write, as stored: "custom.<entry>.<name>"."""
        return [f"custom.{entry}.{name}" for entry, custom in self.custom.items() for name in custom.components]

    def weights_for(self, task_family: str) -> dict[str, float]:
        """`weights` with the family's overrides applied."""
        return {**self.weights, **self.family_weights.get(task_family, {})}
