"""The gate's reward judgement as an anytime-valid sequential test: a deferred candidate is looked at again every round
as more held-out sessions arrive, and looking every round does not raise its false-promotion rate.

Construction: testing by betting (Waudby-Smith & Ramdas 2024, "Estimating means of bounded random variables by
betting", JRSSB 86(1); the game-theoretic test of Shafer & Vovk 2019). For observations X_i >= low whose
conditional means given the past are at most m (the null "mean <= m"), the capital

    K_t(m) = Π_{i<=t} (1 + λ_i (X_i - m)),   λ_i predictable (chosen from X_1..X_{i-1}), 0 <= λ_i <= c / (m - low)

is a nonnegative supermartingale (every factor >= 1 - c > 0 and has conditional mean <= 1), so by Ville's inequality
(1939) P(sup_t K_t(m) >= 1/α) <= α: a test that rejects "mean <= m" the first time the capital reaches 1/α, checked
after every session, at every look, for ever, is wrong at most α of the time. Only a LOWER bound on the observations
is needed (bets are never negative), so the heavy upper tail of importance weights costs power, never validity.
The bets are aGRAPA's (the paper's approximate growth-rate-adaptive plug-in): λ = (μ̂ - m) / (σ̂² + (μ̂ - m)²),
truncated to [0, c/(m - low)], c = BET_FRACTION, μ̂ and σ̂² the running mean and variance of the sessions before.

What is bet on. Rewards r in [a, b] (gate.reward_range; values outside are clipped into it and counted), u = (r - a) /
(b - a) in [0, 1], trajectory weights w = π / π_behaviour truncated from ABOVE only, w̃ = min(w, C), C =
exp(max_log_weight). For each held-out session, candidate c and champion h:

    Y = (b - a)·(w̃_c·u + w̃_h·(1 - u) - 1)     E[Y] <= change   (candidate minus champion expected reward)
    Z = (b - a)·(w̃_c·(1 - u) + w̃_h·u - 1)     E[Z] <= -change

both >= -(b - a). Why E[Y] <= change: V_c = E_b[w_c r] + (mass off the behaviour's support)·r >= (b - a)·E_b[w_c u]
+ a >= (b - a)·E_b[w̃_c u] + a, since E_b[w_c] <= 1, u >= 0 and w̃ <= w; likewise V_h <= b - (b - a)·E_b[w̃_h (1 - u)].
So truncating a weight, or a candidate leaving the served traffic's support, can only make the bound more cautious:
the guarantee does not assume the truncation bias away. (A floor at exp(-max_log_weight), as the jackknife estimate
uses, would raise E[Y] and is not applied here.) An identical candidate gives Y = Z = 0 exactly.

    pass    : the test of "mean of Y <= -max_reward_drop" rejected at level max_false_promotion
              (a candidate worse by max_reward_drop or more passes at most max_false_promotion of the time, at any look)
    fail    : the test of "mean of Z <= 0" rejected at level max_false_promotion (shown worse: an equal or better
              candidate is refused this way at most that often), or sequential_max_sessions sessions were spent
              without a pass (the session budget: tests/trainer/test_sequential_gate.py measures how often an equal
              candidate ends there at the demo's settings, so that both refusals stay within max_false_refusal)
    defer   : otherwise; the candidate is looked at again on the next round's new held-out sessions

Reported bounds: the same test over a grid of m (GRID_POINTS); the lower bound is the largest grid point at and below
which every point has been rejected at some look (the first grid point at or above the true change is rejected at most
α of the time, so the bound exceeds the change at most α of the time, plus a grid step's rounding).

Assumptions: (1) the held-out sessions are independent draws from one traffic distribution while a candidate is
judged, each with its own behaviour policy's recorded logprobs (the behaviour may change between sessions; the bound
holds per session), none of them trained on (the held-out hash split) and none used twice for one candidate (the
accumulator remembers what it consumed); (2) rewards bounded in gate.reward_range; (3) one fixed champion: a champion
promoted meanwhile ends the test (the evidence was about the former one); (4) the candidate is fixed before its
evidence is seen. Not assumed: the truncation bias, light-tailed weights, normality, any minimum sample size.

Everything is vectorised over leading axes (the simulation drives thousands of evidence streams at once); the gate
keeps one Accumulator per judged candidate, whose memory is the grid's capital and a set of consumed session ids
(at most sequential_max_sessions of them).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from trainer.gate.statistics import DEFER, FAIL, PASS

BET_FRACTION = 0.5  # c: a bet never stakes more than half the capital a session could lose
GRID_POINTS = 201  # the reported bounds' resolution: (b - a)·2/200 reward units


@dataclass(frozen=True)
class BettingTest:
    """Tests of "mean <= m" for each m in `hypotheses` on observations >= `low`; arrays of leading shape S."""

    hypotheses: np.ndarray  # (H,)
    low: float
    log_capital: np.ndarray  # (*S, H)
    max_log_capital: np.ndarray  # (*S, H) the running maximum: Ville's inequality bounds it
    count: np.ndarray  # (*S,) observations so far
    total: np.ndarray  # (*S,) their sum (the running mean's numerator; a prior observation of 0 counts once)
    squares: np.ndarray  # (*S,) Σ (x_i - μ̂_{i-1})² plus the prior's spread

    @classmethod
    def start(cls, hypotheses: np.ndarray, low: float, shape: tuple[int, ...] = (), prior_spread: float = 1.0
              ) -> "BettingTest":
        hypotheses = np.asarray(hypotheses, dtype=np.float64)
        if not np.all(hypotheses > low):
            raise ValueError(f"every hypothesis must exceed the observations' lower bound {low}: a mean <= low is "
                             "only the point mass at low")
        zeros = np.zeros((*shape, len(hypotheses)))
        return cls(hypotheses, float(low), zeros, zeros.copy(), np.zeros(shape), np.zeros(shape),
                   np.full(shape, prior_spread ** 2))

    def observe(self, values: np.ndarray) -> "BettingTest":
        """The test after the sessions `values` (*S, k), in the order they were served."""
        values = np.asarray(values, dtype=np.float64)
        if np.any(values < self.low - 1e-9) or not np.all(np.isfinite(values)):
            raise ValueError(f"betting observations must be finite and >= {self.low}: the bound the test relies on")
        log_capital, running_max = self.log_capital.copy(), self.max_log_capital.copy()
        count, total, squares = self.count.copy(), self.total.copy(), self.squares.copy()
        most = BET_FRACTION / (self.hypotheses - self.low)  # (H,)
        for j in range(values.shape[-1]):
            x = values[..., j]
            mean, variance = total / (count + 1), squares / (count + 1)  # predictable: the sessions before this one
            edge = mean[..., None] - self.hypotheses  # (*S, H)
            bet = np.clip(edge / (variance[..., None] + edge ** 2), 0.0, most)  # aGRAPA, truncated
            log_capital += np.log1p(bet * (x[..., None] - self.hypotheses))
            np.maximum(running_max, log_capital, out=running_max)
            squares += (x - mean) ** 2
            total += x
            count += 1
        return replace(self, log_capital=log_capital, max_log_capital=running_max, count=count, total=total,
                       squares=squares)

    def rejected(self, level: float) -> np.ndarray:
        """(*S, H): whether "mean <= m" has been rejected at level `level` at some point so far."""
        return self.max_log_capital >= np.log(1.0 / level)

    def lower_bound(self, level: float) -> np.ndarray:
        """(*S,): the largest grid point at and below which every hypothesis was rejected; `low` where none was."""
        order = np.argsort(self.hypotheses)
        prefix = np.cumprod(self.rejected(level)[..., order], axis=-1).astype(bool)  # rejected up to here
        grid = self.hypotheses[order]
        return np.where(prefix.any(-1), grid[np.maximum(prefix.sum(-1) - 1, 0)], self.low)


def session_bounds(candidate_log_ratio: np.ndarray, champion_log_ratio: np.ndarray, rewards: np.ndarray, cap: float,
                   reward_range: tuple[float, float]) -> tuple[np.ndarray, np.ndarray]:
    """(Y, Z) per session, (..., n) each: E[Y] <= change and E[Z] <= -change, both >= -(b - a) (module docstring)."""
    low, high = reward_range
    span = high - low
    candidate = np.exp(np.minimum(np.asarray(candidate_log_ratio, dtype=np.float64), cap))  # truncated above only
    champion = np.exp(np.minimum(np.asarray(champion_log_ratio, dtype=np.float64), cap))
    u = (np.clip(np.asarray(rewards, dtype=np.float64), low, high) - low) / span
    return span * (candidate * u + champion * (1 - u) - 1), span * (candidate * (1 - u) + champion * u - 1)


@dataclass(frozen=True)
class SequentialVerdict:
    """One look's judgement; arrays of the streams' leading shape (0-d for the gate's one candidate)."""

    decision: np.ndarray  # PASS | FAIL | DEFER
    lower: np.ndarray  # anytime-valid lower bound of the change (level max_false_promotion)
    upper: np.ndarray  # anytime-valid upper bound of the change (same level)
    sessions: np.ndarray  # sessions judged so far
    looks: int  # looks so far (a look with no new session is not one)
    shown_worse: np.ndarray  # bool: failed because the upper bound fell below 0
    out_of_budget: np.ndarray  # bool: failed because the session budget was spent without a pass


@dataclass(frozen=True)
class SequentialSettings:
    """The gate settings the sequential test reads (liverl.config.trainer.GateConfig)."""

    max_reward_drop: float
    max_false_promotion: float
    max_log_weight: float
    max_sessions: int
    reward_range: tuple[float, float] = (-1.0, 1.0)

    @classmethod
    def of(cls, config) -> "SequentialSettings":
        return cls(config.max_reward_drop, config.max_false_promotion, config.max_log_weight,
                   config.sequential_max_sessions, tuple(config.reward_range))

    @property
    def testing(self) -> bool:
        """Whether there is a test at all: a drop of the whole reward range or more turns it off (nothing can be worse
        by that much; the gate then passes the reward check without one, trainer/gate/promotion.py)."""
        return reward_test_on(self.max_reward_drop, self.reward_range)


def reward_test_on(max_reward_drop: float, reward_range: tuple[float, float]) -> bool:
    """Whether a reward test decides anything: a drop of the whole reward range or more turns it off."""
    return max_reward_drop < reward_range[1] - reward_range[0]


@dataclass
class Accumulator:
    """One candidate's (or, vectorised, many simulated candidates') evidence across looks: bounded memory, the two
    tests' capital and the ids of the sessions consumed. Mutable: each look updates it in place."""

    settings: SequentialSettings
    shape: tuple[int, ...] = ()
    grid: bool = True  # False: only the two decision hypotheses (the simulation); True: also the reported bounds
    looks: int = 0
    seen: set[str] = field(default_factory=set)
    promote: BettingTest | None = None  # on Y: "change <= m"
    refuse: BettingTest | None = None  # on Z: "-change <= m", i.e. "change >= -m"
    champion: str | None = None  # the champion this evidence is about (the gate's); another one ends the test

    def __post_init__(self) -> None:
        s = self.settings
        span = s.reward_range[1] - s.reward_range[0]
        if not span > 0:
            raise ValueError(f"gate.reward_range {s.reward_range} must run from low to high")
        if not s.max_reward_drop < span:
            raise ValueError(f"max_reward_drop {s.max_reward_drop} must be below the reward range's width {span}")
        extra = np.linspace(-span, span, GRID_POINTS)[1:] if self.grid else np.empty(0)
        self.promote = BettingTest.start(np.unique(np.r_[-s.max_reward_drop, extra]), -span, self.shape, span / 2)
        self.refuse = BettingTest.start(np.unique(np.r_[0.0, extra]), -span, self.shape, span / 2)
        self._at_drop = int(np.searchsorted(self.promote.hypotheses, -s.max_reward_drop))
        self._at_zero = int(np.searchsorted(self.refuse.hypotheses, 0.0))

    def new_sessions(self, ids: list[str]) -> list[int]:
        """Indices of the sessions among `ids` this accumulator has not consumed (the gate's evidence overlaps from
        round to round: the most recent max_holdout held-out sessions)."""
        return [i for i, session in enumerate(ids) if session not in self.seen]

    def look(self, candidate_log_ratio: np.ndarray, champion_log_ratio: np.ndarray, rewards: np.ndarray,
             ids: list[str] | None = None) -> SequentialVerdict:
        """Take in new sessions (..., k), in serving order (k may be 0), and judge all sessions so far."""
        s = self.settings
        rewards = np.asarray(rewards, dtype=np.float64)
        room = s.max_sessions - int(np.max(self.promote.count, initial=0))
        if rewards.shape[-1] > room:  # the budget caps what one candidate is judged on: the earliest sessions count
            candidate_log_ratio, champion_log_ratio, rewards = (np.asarray(a)[..., :max(room, 0)] for a in (
                candidate_log_ratio, champion_log_ratio, rewards))
            ids = None if ids is None else ids[:max(room, 0)]
        if rewards.shape[-1]:
            y, z = session_bounds(candidate_log_ratio, champion_log_ratio, rewards, s.max_log_weight, s.reward_range)
            self.promote, self.refuse = self.promote.observe(y), self.refuse.observe(z)
            self.looks += 1
            self.seen.update(ids or ())
        return self.verdict()

    def state(self) -> dict:
        """What a restarted trainer needs to go on with this candidate's test (JSON-ready; floats round-trip exactly):
        the settings, the looks, the consumed session ids and both tests' capital. One candidate's only."""
        if self.shape != () or not self.grid:
            raise ValueError("only one candidate's test (shape (), with its grid) is saved")
        s = self.settings
        return {"settings": {"max_reward_drop": s.max_reward_drop, "max_false_promotion": s.max_false_promotion,
                             "max_log_weight": s.max_log_weight, "max_sessions": s.max_sessions,
                             "reward_range": list(s.reward_range)},
                "looks": self.looks, "seen": sorted(self.seen), "champion": self.champion,
                "promote": _test_state(self.promote), "refuse": _test_state(self.refuse)}

    @classmethod
    def from_state(cls, state: dict, settings: SequentialSettings) -> "Accumulator":
        """The test state() saved, to go on under `settings`. ValueError when it was run under other settings (its
        hypotheses, level or budget would not be this test's) or does not read as one."""
        saved = state["settings"]
        if SequentialSettings(**{**saved, "reward_range": tuple(saved["reward_range"])}) != settings:
            raise ValueError(f"it was run under other gate settings ({saved})")
        accumulator = cls(settings, looks=int(state["looks"]), seen={str(s) for s in state["seen"]},
                          champion=state["champion"])
        accumulator.promote = _restored_test(state["promote"], accumulator.promote)
        accumulator.refuse = _restored_test(state["refuse"], accumulator.refuse)
        return accumulator

    def pass_capital(self) -> float:
        """How far this candidate's test has come toward a pass: the log capital of its bet against "worse by
        max_reward_drop", which passes at log(1 / max_false_promotion) (one candidate, not the simulation's many)."""
        return float(self.promote.log_capital[..., self._at_drop])

    def verdict(self) -> SequentialVerdict:
        s = self.settings
        level = s.max_false_promotion
        passed = self.promote.rejected(level)[..., self._at_drop]
        shown_worse = ~passed & self.refuse.rejected(level)[..., self._at_zero]
        sessions = self.promote.count
        out_of_budget = ~passed & ~shown_worse & (sessions >= s.max_sessions)
        decision = np.where(passed, PASS, np.where(shown_worse | out_of_budget, FAIL, DEFER))
        return SequentialVerdict(decision=decision, lower=self.promote.lower_bound(level),
                                 upper=-self.refuse.lower_bound(level), sessions=sessions, looks=self.looks,
                                 shown_worse=shown_worse, out_of_budget=out_of_budget)


def _test_state(test: BettingTest) -> dict:
    return {"hypotheses": test.hypotheses.tolist(), "low": test.low, "log_capital": test.log_capital.tolist(),
            "max_log_capital": test.max_log_capital.tolist(), "count": float(test.count), "total": float(test.total),
            "squares": float(test.squares)}


def _restored_test(state: dict, fresh: BettingTest) -> BettingTest:
    """The saved test, checked against a fresh one of the same settings: the same hypotheses and bound, finite
    capital that never exceeds its running maximum, moments a test could have."""
    hypotheses = np.asarray(state["hypotheses"], dtype=np.float64)
    capital, running_max = (np.asarray(state[key], dtype=np.float64) for key in ("log_capital", "max_log_capital"))
    count, total, squares = (np.asarray(float(state[key])) for key in ("count", "total", "squares"))
    if (hypotheses.shape != fresh.hypotheses.shape or not np.array_equal(hypotheses, fresh.hypotheses)
            or float(state["low"]) != fresh.low):
        raise ValueError("its hypotheses are not those of these settings")
    if capital.shape != hypotheses.shape or running_max.shape != hypotheses.shape:
        raise ValueError("its capital does not match its hypotheses")
    if not (np.all(np.isfinite(capital)) and np.all(capital <= running_max) and np.all(running_max >= 0)
            and float(count) >= 0 and float(squares) > 0 and np.isfinite(float(total))):
        raise ValueError("its capital or running moments are not a test's")
    return replace(fresh, log_capital=capital, max_log_capital=running_max, count=count, total=total,
                   squares=squares)


def describe(verdict: SequentialVerdict, settings: SequentialSettings) -> str:
    """The decision in words, for the gate report (one candidate)."""
    looks, n = verdict.looks, int(verdict.sessions)
    where = f"sequential test after {looks} look{'s' * (looks != 1)}, {n} session{'s' * (n != 1)}"
    lower, upper, drop = float(verdict.lower), float(verdict.upper), settings.max_reward_drop
    level = f"anytime-valid at level {settings.max_false_promotion:g}"
    if verdict.decision == PASS:
        return f"{where}: lower bound {lower:+.2f} > -{drop:g} ({level})"
    if bool(verdict.shown_worse):
        return f"{where}: upper bound {upper:+.2f} < 0, shown worse than the champion ({level})"
    if bool(verdict.out_of_budget):
        return (f"{where}: the session budget gate.sequential_max_sessions {settings.max_sessions} is spent and the "
                f"lower bound {lower:+.2f} is still not above -{drop:g}")
    return f"{where}: lower bound {lower:+.2f}, upper {upper:+.2f}, not yet above -{drop:g} ({level}); looks again"
