"""Rewards labelled per second on a realistic mix of sessions, with and without the generative judge.

    .venv/bin/python bench/rewards_bench.py [--sessions 300] [--rounds 5] [--judge-latency-ms 20]

Side by side in one run, medians over rounds:
- baseline: the plainest reward a pipeline could use (find the Outcome event, read its score);
- label: every component, monitor signal and critical steps (liverl.rewards.label), then mix;
- label_batch + judge: the same with the generative judge, against a local OpenAI-compatible double that
  answers after --judge-latency-ms (a stand-in for a remote judge model), cold cache and warm cache.
The mix is 60% coding, 25% search, 15% orchestrator sessions; every agent of a session (sub-agents too) is
one labelled trajectory.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repo root for bench.report

from bench.report import environment_line, record
from liverl.config.rewards import RewardsConfig
from liverl.rewards import label, mix
from liverl.rewards.batch import label_batch
from liverl.rewards.judge import Judge
from liverl.v1 import session_event_pb2 as ev
from tests.judge_double import JudgeDouble, Reply
from tests.liverl.rewards.session_builder import SessionBuilder


def coding(rng: random.Random, n: int) -> SessionBuilder:
    s = SessionBuilder("coding", session_id=f"c{n}")
    s.user_message("fix the failing test in utils.py")
    edits = []
    for turn in range(rng.randint(5, 30)):
        name = rng.choice(["read_file", "edit", "run_tests", "search_code", "edit"])
        call = s.act(name, {"path": f"f{rng.randint(0, 6)}.py", "turn": turn % 4}, valid=rng.random() > 0.05)
        if name == "edit":
            edits.append(call)
    if rng.random() < 0.3:
        s.user_message(rng.choice(["it still fails with an error", "thanks, also add a docstring"]), follow_up=True)
    s.outcome(success=rng.random() < 0.6)
    s.end()
    for call in edits[:2]:
        s.feedback(rng.choice([ev.FEEDBACK_KIND_EDIT_KEPT, ev.FEEDBACK_KIND_EDIT_REVERTED]), target_call_id=call)
    return s


def search(rng: random.Random, n: int) -> SessionBuilder:
    s = SessionBuilder("search", session_id=f"s{n}", token_budget=4000)
    gold = [f"g{i}" for i in range(5)]
    for turn in range(rng.randint(10, 40)):
        if rng.random() < 0.3:
            s.act("prune_chunks", {"chunk_ids": [f"x{turn - 1}-{i}" for i in range(3)]}, prompt_tokens=turn * 120)
        else:
            chunks = [f"x{turn}-{i}" for i in range(4)] + ([rng.choice(gold)] if rng.random() < 0.3 else [])
            s.act("search", {"q": f"query {turn}"}, chunk_ids=chunks, prompt_tokens=turn * 120)
    s.outcome(success=True, gold_chunk_ids=gold, answer_chunk_ids=gold[:1])
    s.end()
    return s


def orchestrator(rng: random.Random, n: int) -> tuple[SessionBuilder, list[str]]:
    s = SessionBuilder("orchestrator", session_id=f"o{n}", role="orchestrator")
    subagents = [f"sub-{i}" for i in range(rng.randint(3, 6))]
    for stage in range(rng.randint(1, 3)):
        s.model_call()
        for sub in subagents:
            if stage == 0:
                s.subagent_created(sub)
            s.task_assigned(sub, f"t{stage}-{sub}", stage=stage)
            steps = rng.randint(1, 8)
            for k in range(steps):
                s.act("search", {"q": f"{sub} {k}"}, chunk_ids=[f"c{k}"], agent_id=sub)
            s.subagent_finished(sub, f"t{stage}-{sub}", success=rng.random() < 0.8, steps=steps)
    s.outcome(success=rng.random() < 0.7)
    s.end()
    return s, subagents


def realistic_mix(sessions: int, seed: int) -> list[tuple]:
    rng = random.Random(seed)
    items = []
    for n in range(sessions):
        roll = rng.random()
        if roll < 0.6:
            items.append((coding(rng, n).build(), "main"))
        elif roll < 0.85:
            items.append((search(rng, n).build(), "main"))
        else:
            builder, subagents = orchestrator(rng, n)
            record = builder.build()
            items += [(record, "main")] + [(record, sub) for sub in subagents]
    return items


def family_of(session) -> str:
    return session.start().task_family


def baseline(items, config) -> None:
    for session, _agent in items:
        next((e.outcome.score for e in session.events if e.WhichOneof("body") == "outcome"), 0.0)


def labelled(items, config) -> None:
    for session, agent_id in items:
        mix(label(session, agent_id, config).components, family_of(session), 100, config)


def median_rate(work, items, rounds: int) -> float:
    rates = []
    for _ in range(rounds):
        start = time.perf_counter()
        work(items)
        rates.append(len(items) / (time.perf_counter() - start))
    return statistics.median(rates)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--judge-latency-ms", type=float, default=20.0)
    parser.add_argument("--judge-concurrency", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    print(environment_line())
    config = RewardsConfig()
    items = realistic_mix(args.sessions, args.seed)
    print(f"{len(items)} trajectories from {args.sessions} sessions "
          f"(events/session median {statistics.median(len(r.events) for r, _ in items):.0f}), {args.rounds} rounds")
    base = median_rate(lambda batch: baseline(batch, config), items, args.rounds)
    full = median_rate(lambda batch: labelled(batch, config), items, args.rounds)
    print(f"baseline (outcome score only)   {base:12,.0f} trajectories/s")
    print(f"label + mix                     {full:12,.0f} trajectories/s   ratio {full / base:.4f} of baseline")

    judged = config.model_copy(deep=True)
    judged.judge.enabled = True
    judged.judge.max_concurrency = args.judge_concurrency
    delay = args.judge_latency_ms / 1000.0
    with JudgeDouble(lambda body: Reply("7", delay_s=delay)) as server:
        judged.judge.base_url = server.base_url
        cold_rates, warm_rates = [], []
        for _ in range(args.rounds):
            with Judge(judged.judge) as judge:  # a fresh judge: empty cache
                start = time.perf_counter()
                label_batch(items, judged, judge)
                cold_rates.append(len(items) / (time.perf_counter() - start))
                start = time.perf_counter()
                labels = label_batch(items, judged, judge)
                warm_rates.append(len(items) / (time.perf_counter() - start))
        unjudged = sum(1 for got in labels if got.signals.get("judge.unjudged") == 1.0)
    cold, warm = statistics.median(cold_rates), statistics.median(warm_rates)
    print(f"label + judge, cold cache       {cold:12,.0f} trajectories/s   ratio {cold / full:.4f} of label "
          f"({len(judged.judge.rubrics)} rubrics, {args.judge_latency_ms:g} ms/request, "
          f"{args.judge_concurrency} in flight)")
    print(f"label + judge, warm cache       {warm:12,.0f} trajectories/s   ratio {warm / full:.4f} of label")
    print(f"unjudged in the last round: {unjudged} of {len(items)}")
    print(environment_line())
    record("rewards", {"baseline_per_s": base, "label_mix_per_s": full, "ratio": full / base,
                       "judge_cold_per_s": cold, "judge_warm_per_s": warm})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
