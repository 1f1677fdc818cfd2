"""bench/serving_bench.EngineOccupancy: the time-weighted mean of requests inside the engine, which the serving
bench prints per path to tell a client's turnaround apart from CPU taken from the engine."""

from __future__ import annotations

import asyncio

from bench.serving_bench import EngineOccupancy, Run


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class StepEngine:
    """Yields one delta per step; the test moves the clock between steps."""

    name = "steps"

    def __init__(self, clock: Clock, step_s: float, steps: int):
        self.clock, self.step_s, self.steps = clock, step_s, steps

    async def generate(self, prompt_token_ids, sampling, request_id, final_only=False):
        for _ in range(self.steps):
            await asyncio.sleep(0)
            self.clock.now += self.step_s
            yield [1]


async def _drain(occupancy: EngineOccupancy) -> None:
    async for _ in occupancy.generate([1], None, "r"):
        pass


def test_one_request_all_the_time_is_one():
    clock = Clock()
    occupancy = EngineOccupancy(StepEngine(clock, 0.1, 10), clock)
    run = occupancy.measure(lambda: (asyncio.run(_drain(occupancy)), Run("x"))[1])
    assert abs(run.in_engine - 1.0) < 1e-9


def test_idle_time_between_requests_lowers_the_mean():
    clock = Clock()
    occupancy = EngineOccupancy(StepEngine(clock, 0.1, 10), clock)

    def two_with_a_gap() -> Run:
        asyncio.run(_drain(occupancy))  # 1 s inside
        clock.now += 1.0  # 1 s with nothing inside (a client's turnaround)
        asyncio.run(_drain(occupancy))  # 1 s inside
        return Run("gap")

    assert abs(occupancy.measure(two_with_a_gap).in_engine - 2 / 3) < 1e-9


def test_overlapping_requests_add_up_and_other_attributes_pass_through():
    clock = Clock()

    class Gate:
        name = "gate"

        def __init__(self):
            self.open = None

        async def generate(self, *args, **kwargs):
            await self.open.wait()
            yield [1]

    engine = Gate()
    occupancy = EngineOccupancy(engine, clock)

    async def two_inside_for_a_second():
        engine.open = asyncio.Event()
        both = asyncio.gather(_drain(occupancy), _drain(occupancy))
        await asyncio.sleep(0)  # both enter and wait
        clock.now += 1.0
        engine.open.set()
        await both

    run = occupancy.measure(lambda: (asyncio.run(two_inside_for_a_second()), Run("pair"))[1])
    assert abs(run.in_engine - 2.0) < 1e-9
    assert occupancy.name == "gate"  # everything but generate is the engine's


def test_a_failing_request_still_leaves():
    class Failing(StepEngine):
        async def generate(self, *args, **kwargs):
            self.clock.now += 1.0
            raise RuntimeError("engine down")
            yield  # an async generator

    clock = Clock()
    occupancy = EngineOccupancy(Failing(clock, 0.1, 1), clock)

    async def fail():
        try:
            await _drain(occupancy)
        except RuntimeError:
            pass

    first = occupancy.measure(lambda: (asyncio.run(fail()), Run("f"))[1])
    clock.now += 1.0
    second = occupancy.measure(lambda: Run("idle"))  # nothing inside: the failed request left
    assert abs(first.in_engine - 1.0) < 1e-9 and second.in_engine == 0.0
