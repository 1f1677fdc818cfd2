"""The sampling contract both APIs share: ranges refused (never coerced), greedy recorded as applied."""

import math

import pytest

from serving.generation import BadRequest, Completions, Limits
from serving.metrics import ServingMetrics
from serving.router import Router


@pytest.fixture
def completions():
    return Completions(Router(), None, ServingMetrics(), "m", Limits(512, 16, 1000, 60.0), "demo")


def test_defaults_and_disabled_top_k(completions):
    sampling = completions.sampling()
    assert (sampling.temperature, sampling.top_p, sampling.top_k, sampling.max_tokens) == (1.0, 1.0, 0, 16)
    assert completions.sampling(top_k=-1).top_k == 0 == completions.sampling(top_k=0).top_k  # OpenAI's "disabled"


def test_greedy_is_recorded_as_applied(completions):
    sampling = completions.sampling(temperature=1e-6, top_p=0.5, top_k=3)
    assert (sampling.temperature, sampling.top_p, sampling.top_k) == (0.0, 1.0, 0)


@pytest.mark.parametrize("field, value", [
    ("temperature", -0.1), ("temperature", 2.5), ("temperature", math.nan), ("temperature", math.inf),
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
    from serving.engine import Delta

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
