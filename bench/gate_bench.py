"""Promotion gate benchmark: the gate's scoring of held-out trajectories (trainer/gate/promotion.py: candidate and champion
scored under vLLM's processing, top-p included, plus their full-vocabulary KL, on the loss-masked tokens) against a
plain baseline on the same trajectories: one Hugging Face forward per model over whole sequences, temperature-1
log-softmax, the targets' log-probabilities and the KL. A third side, "separate", scores each model on its own and
then takes the KL in a pass of its own (four forwards, as the gate did before trainer/gate/scoring.py's score_pair).

    .venv/bin/python bench/gate_bench.py                        # a tiny Llama built here
    .venv/bin/python bench/gate_bench.py --model DIR --seq 320  # a real Hugging Face folder (SmolLM2, ...)

The champion is the folder's model; the candidate is a copy with its weights nudged, so the KL is not 0. Rounds
alternate which side goes first; each prints both sides' trajectories/s. Prints the medians and the median of the
per-round ratios gate/plain. Not a test: figures vary with the machine.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import tempfile
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=None, help="a HF policy folder; default: a tiny Llama")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--trajectories", type=int, default=16, help="held-out trajectories per round")
    parser.add_argument("--seq", type=int, default=256, help="most tokens per trajectory")
    parser.add_argument("--min-seq", type=int, default=128, help="fewest tokens per trajectory")
    parser.add_argument("--completion", type=float, default=0.25, help="share of each trajectory the policy sampled")
    args = parser.parse_args(argv)

    import torch
    from transformers import AutoModelForCausalLM

    from bench.report import environment, environment_line, record
    from demo.policy.tiny_policy import build_policy
    from liverl.config import load_config

    folder = args.model or build_policy(Path(tempfile.mkdtemp()) / "llama", [f"w{i}" for i in range(500)],
                                        arch="llama", n_layer=4, n_embd=128, n_head=2)
    measured_in = environment()
    champion = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    candidate = _nudged(champion)
    config = load_config(environ={}, overrides=[])
    vocab = champion.config.vocab_size
    sides = {"gate": lambda ev: _gate_side(candidate, champion, ev, config),
             "separate": lambda ev: _separate_side(candidate, champion, ev, config),
             "plain": lambda ev: _plain_side(candidate, champion, ev)}
    rates: dict[str, list[float]] = {name: [] for name in sides}
    for round_ in range(args.rounds + 1):  # round 0 warms both up and is not counted
        evidence = _evidence(args, vocab, seed=round_)
        order = list(sides) if round_ % 2 == 0 else list(reversed(sides))
        for name in order:
            started = time.perf_counter()
            sides[name](evidence)
            if round_:
                rates[name].append(args.trajectories / (time.perf_counter() - started))
        if round_:
            print(f"round {round_}/{args.rounds} | " + " | ".join(f"{n} {rates[n][-1]:.2f} traj/s" for n in sides),
                  flush=True)
    ratios = [gate / plain for gate, plain in zip(rates["gate"], rates["plain"])]
    over_separate = [gate / separate for gate, separate in zip(rates["gate"], rates["separate"])]
    median = {name: statistics.median(values) for name, values in rates.items()}
    print(environment_line())
    name = args.model.name if args.model else "tiny llama 4x128"
    print(f"gate bench | {name} | {args.trajectories} held-out traj x {args.min_seq}-{args.seq} tok, "
          f"{args.completion:.0%} sampled at T 0.7 / top-p 0.9 | torch threads {torch.get_num_threads()}")
    for side in sides:
        print(f"{side:8s} traj/s {median[side]:8.2f} (rounds: {', '.join(f'{r:.2f}' for r in rates[side])})")
    print(f"ratio gate/plain, median of rounds {statistics.median(ratios):6.3f} "
          f"(rounds: {', '.join(f'{r:.3f}' for r in ratios)})")
    print(f"ratio gate/separate, median of rounds {statistics.median(over_separate):6.3f} "
          f"(rounds: {', '.join(f'{r:.3f}' for r in over_separate)})")
    record("gate" if args.model is None else f"gate_{args.model.name}", {
        "trajectories_per_s": median, "gate_over_plain": statistics.median(ratios), "round_ratios": ratios,
        "gate_over_separate": statistics.median(over_separate),
        "rounds": args.rounds, "trajectories": args.trajectories}, measured_in=measured_in)
    return 0


def _nudged(model):
    import torch

    candidate = copy.deepcopy(model)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for parameter in candidate.parameters():
            parameter.add_(torch.randn(parameter.shape, generator=generator) * 1e-3)
    return candidate


def _evidence(args, vocab: int, seed: int):
    import random

    from trainer.gate.holdout import GateEvidence
    from trainer.step.trajectory import SpanSampling, Trajectory

    rng = random.Random(seed)
    holdout = []
    for i in range(args.trajectories):
        length = rng.randint(args.min_seq, args.seq)
        prompt = length - max(int(length * args.completion), 1)
        tokens = tuple(rng.randrange(4, vocab) for _ in range(length))
        mask = tuple([0] * prompt + [1] * (length - prompt))
        behaviour = tuple([0.0] * prompt + [-3.0 + rng.random()] * (length - prompt))
        holdout.append(Trajectory(f"{seed}-{i}", 0, "coding", "", "single", ("1",), tokens, mask, behaviour,
                                  reward_components={"outcome": float(i % 2)},
                                  span_sampling=(SpanSampling(prompt, length, 0.7, 0.9, 0),)))
    n = len(holdout)
    return GateEvidence(tuple(holdout), tuple({} for _ in range(n)), tuple(float(i % 2) for i in range(n)),
                        tuple(float(i % 2) - 0.5 for i in range(n)), drift=None)


def _gate_side(candidate, champion, evidence, config) -> None:
    import torch

    from trainer.gate.promotion import _score

    with torch.no_grad():
        _score(candidate, champion, evidence, config.trainer.loss, config.trainer.max_seq_len)


def _separate_side(candidate, champion, evidence, config) -> None:
    """Each model scored in a pass of its own, then the KL in a third pass with both: four forwards a batch."""
    import torch

    from trainer.gate.promotion import EVAL_TOKEN_BUDGET
    from trainer.gate.scoring import score_pair
    from trainer.step.batching import collate, pack, score_batch, trajectory_samples

    samples = [sample for trajectory, advantage in zip(evidence.holdout, evidence.advantages)
               for sample in trajectory_samples(trajectory, 1.0, config.trainer.max_seq_len, advantage)]
    with torch.no_grad():
        for group in pack(samples, EVAL_TOKEN_BUDGET):  # the gate's packing
            batch = collate(group)
            for model in (candidate, champion):
                score_batch(model, batch, config.trainer.loss.scoring_chunk_tokens)
            score_pair(candidate, champion, batch.token_ids, batch.attention_mask, None, batch.position_ids,
                       config.trainer.loss.scoring_chunk_tokens, wanted=batch.loss_mask > 0)


def _plain_side(candidate, champion, evidence) -> None:
    """One forward per model and trajectory, full logits; log-probabilities of the sampled tokens and the KL."""
    import torch

    with torch.no_grad():
        for trajectory in evidence.holdout:
            ids = torch.tensor([trajectory.token_ids])
            mask = torch.tensor(trajectory.loss_mask[1:], dtype=torch.bool)
            cand = candidate(input_ids=ids).logits[0, :-1].log_softmax(-1)
            champ = champion(input_ids=ids).logits[0, :-1].log_softmax(-1)
            targets = ids[0, 1:, None]
            _ = cand.gather(-1, targets)[mask], champ.gather(-1, targets)[mask]
            _ = (cand.exp() * (cand - champ)).sum(-1)[mask]


if __name__ == "__main__":
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repo root for bench.report
    raise SystemExit(main())
