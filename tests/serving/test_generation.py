"""The sampling contract both APIs share: ranges refused (never coerced), greedy recorded as applied."""

import math

import pytest

from serving.generation import BadRequest, CompletionLimits, Completions
from serving.metrics import ServingMetrics
from serving.router import Router


@pytest.fixture
def completions():
    return Completions(Router(), None, ServingMetrics(), "m", CompletionLimits(512, 16, 1000, 60.0), "demo")


def test_defaults_and_disabled_top_k(completions):
    sampling = completions.sampling()
    assert (sampling.temperature, sampling.top_p, sampling.top_k, sampling.max_tokens) == (1.0, 1.0, 0, 16)
    assert completions.sampling(top_k=-1).top_k == 0 == completions.sampling(top_k=0).top_k  # OpenAI's "disabled"


def test_greedy_is_recorded_as_applied(completions):
    sampling = completions.sampling(temperature=1e-6, top_p=0.5, top_k=3)
    assert (sampling.temperature, sampling.top_p, sampling.top_k) == (0.0, 1.0, 0)


def test_the_lowest_sampled_temperature_is_served_as_applied(completions):
    import numpy as np

    assert completions.sampling(temperature=0.01).temperature == 0.01
    # gRPC's float carries 0.01 as 0.0099999998: the engine samples it at 0.01, and that is recorded
    assert completions.sampling(temperature=float(np.float32(0.01))).temperature == 0.01
    assert completions.sampling(temperature=9e-6).temperature == 0.0  # greedy, as before


@pytest.mark.parametrize("field, value", [
    ("temperature", -0.1), ("temperature", 2.5), ("temperature", math.nan), ("temperature", math.inf),
    ("temperature", 1e-5), ("temperature", 0.005), ("temperature", 0.0099),
    ("top_p", 0.0), ("top_p", 1.01), ("top_k", -2), ("top_k", 2**31), ("max_tokens", 0), ("max_tokens", 513),
    ("seed", 2**63), ("stop", [""]), ("stop", ["a"] * 5),
])
def test_values_outside_their_range_are_refused(completions, field, value):
    with pytest.raises(BadRequest) as refused:
        completions.sampling(**{field: value})
    assert refused.value.param == field and refused.value.reason == "bad-sampling"


def test_prompts_are_bounded_before_any_work(completions):
    for prompt, ids, reason in [("", [], "empty-prompt"), ("x", [1], "bad-prompt"), ("x" * 1001, None, "too-long"),
                                (None, [1] * 512, "too-long")]:
        with pytest.raises(BadRequest) as refused:
            completions.check_prompt(prompt, ids)
        assert refused.value.reason == reason


def _deltas(count: int, pause_s: float, closed: list):
    from serving.engines.engine import Delta

    async def generate():
        import asyncio

        try:
            for i in range(count):
                await asyncio.sleep(pause_s)
                yield Delta([i], [-1.0])
        finally:
            closed.append(True)  # the engine's own clean-up (vLLM aborts the request here)

    return generate()


def test_a_completion_within_its_deadline_streams_every_delta():
    import asyncio
    import time

    from serving.generation import _within

    async def collect():
        closed: list = []
        got = [d.token_ids[0] async for d in _within(time.time() + 5, _deltas(5, 0.001, closed))]
        return got, closed

    assert asyncio.run(collect()) == ([0, 1, 2, 3, 4], [True])


def test_a_completion_past_its_deadline_is_cancelled_with_deadline_exceeded():
    import asyncio
    import time

    from serving.generation import DeadlineExceeded, _within

    async def collect():
        closed, got = [], []
        with pytest.raises(DeadlineExceeded):
            async for delta in _within(time.time() + 0.2, _deltas(100, 0.05, closed)):
                got.append(delta)
                await asyncio.sleep(0.01)  # the consumer's own awaits are never cancelled by the deadline
        return got, closed

    got, closed = asyncio.run(collect())
    assert 1 <= len(got) < 100 and closed == [True]


class _SlowEngine:
    """Sends one token per pause; records whether its generation was closed (vLLM aborts the request there)."""

    def __init__(self, count: int, pause_s: float):
        self.count, self.pause_s, self.closed, self.final_only = count, pause_s, [], None

    def generate(self, prompt_token_ids, sampling, request_id, final_only=False):
        self.final_only = final_only
        return _deltas(self.count, self.pause_s, self.closed)


def _call(engine, timeout_s: float):
    import asyncio

    from serving.generation import Caller
    from serving.router import Slot

    async def run():
        router = Router()
        slot = Slot("7", engine, tokenizer=range(100), policy_dir=None, source_uri="")  # len(): 100 ids
        router.champion = slot
        metrics = ServingMetrics()
        completions = Completions(router, None, metrics, "m", CompletionLimits(512, 16, 1000, timeout_s), "demo")
        call = await completions.begin(Caller("grpc"), None, [1, 2], completions.sampling())
        call._advance_text = lambda: ""  # no tokenizer in this test
        try:
            await call.run()
            return call, slot, metrics, None
        except Exception as error:  # noqa: BLE001 - returned for the test to look at
            return call, slot, metrics, error

    return asyncio.run(run())


def test_a_whole_completion_is_asked_for_as_one_and_releases_its_lease():
    engine = _SlowEngine(3, 0.001)
    call, slot, metrics, error = _call(engine, 5.0)
    assert error is None and engine.final_only is True and call.token_ids == [0, 1, 2]
    assert call.first_token_time == 0.0  # nobody saw a first token: none is recorded
    assert slot.in_flight == 0 and engine.closed == [True]
    assert metrics.value("liverl_serving_requests_total", {"version": "7", "api": "grpc", "outcome": "ok"}) == 1


def test_a_whole_completion_past_its_deadline_is_closed_and_counted_as_an_error():
    from serving.generation import DeadlineExceeded

    engine = _SlowEngine(100, 0.05)
    call, slot, metrics, error = _call(engine, 0.2)
    assert isinstance(error, DeadlineExceeded)
    assert 1 <= len(call.token_ids) < 100
    assert slot.in_flight == 0 and engine.closed == [True]  # the engine's generation was closed, the lease freed
    assert metrics.value("liverl_serving_requests_total", {"version": "7", "api": "grpc", "outcome": "error"}) == 1
    assert metrics.value("liverl_serving_in_flight", {"version": "7"}) == 0
