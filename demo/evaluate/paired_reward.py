"""Paired outcome reward of two toy policy folders on held-out product tasks: the trainer gate's online evidence.

    python -m demo.evaluate gate --candidate DIR --champion DIR --tasks 30 --seed 0
    python -m demo.evaluate gate --serve --tasks 30 --seed 0     (trainer.gate.online_eval_mode = "persistent")

Runs the same N held-out tasks (the families in turn) against each folder with the light in-process
engine (LocalPolicy, at the product's temperature and call length), and prints one JSON line on stdout in
the format trainer/gate/online_eval.py reads; a progress line per policy goes to stderr. With --serve it answers
one such line, with the request's "id", per request line {"id": ID, "candidate": DIR, "champion": DIR} on stdin
until stdin ends, keeping each policy's held-out sessions by the digest of its weights: a champion, judged
against many times, runs once.

- Held out: session i draws its task, its simulated user and its sub-agents' luck from
  random.Random("liverl-heldout-<seed>-<i>"). Traffic (demo/product/traffic.py) seeds
  every session with an integer; a string seed is hashed by SHA-512 into a >512-bit integer, so no held-out
  session shares its random stream with any session a version was trained on. The task *space* is small
  (2 orchestrator tasks, ~4k coding prompts), so what is held out is the instance, not always the prompt.
- Reward: the product's own verifiable outcome score in [0, 1] (the served reward the demo plots), not
  the rewards library's mixed reward the trainer optimises: the gate should judge the objective itself,
  which a policy that games a mixed-reward term cannot raise.
- Monitors: the rewards library's hacking rates ("rate.*" of liverl.rewards.version_monitors: broken tool
  calls, clarifying instead of acting, giving up, repeated calls, prune streaks, budget violations) on each
  policy's own outputs, every session labelled exactly as the pipelines label it (liverl.rewards.label).
- Paired: both policies run the same tasks and draw the same random numbers at the same call of the same
  session (CoupledPolicy: common random numbers), so a policy evaluated against itself differs by exactly 0
  and similar policies differ only where their distributions do; the candidate-minus-champion SEs are
  jackknife SEs over tasks (for a mean this is the usual SE; for the ratio rates, the delta method's).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from demo.evaluate.stats import jackknife_se
from demo.product.policy import MAIN_AGENT_ID, ROLE_SINGLE, Completion

HELDOUT_SEED_PREFIX = "liverl-heldout"
UNUSED_MONITORS = ("rate.unjudged",)  # the evaluator never calls the judge: every session would be unjudged


@dataclass(frozen=True)
class EvaluatedSession:
    """One held-out session of one policy: its task family, outcome score and library label (a monitor row)."""

    family: str
    reward: float
    row: dict


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m demo.evaluate gate", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--candidate", type=Path, help="the candidate's HF policy folder")
    parser.add_argument("--champion", type=Path, help="the champion's HF policy folder")
    parser.add_argument("--serve", action="store_true",
                        help="answer one JSON request line per candidate on stdin instead (see above)")
    parser.add_argument("--tasks", type=int, default=30, help="held-out tasks per policy (at least 2)")
    parser.add_argument("--seed", type=int, default=0, help="picks the held-out tasks and the sampling")
    parser.add_argument("--config", type=Path, default=None,
                        help="a TOML file ([demo] temperature, families; [rewards]); LIVERL_* variables also apply")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    args = parser.parse_args(argv)
    if args.tasks < 2:
        parser.error("--tasks must be at least 2: one task gives no standard error")
    if args.serve:
        if args.candidate or args.champion:
            parser.error("--serve takes the folders from stdin: leave out --candidate and --champion")
        return args
    for name in ("candidate", "champion"):
        folder = getattr(args, name)
        if folder is None:
            parser.error(f"--{name} is required (or --serve)")
        if not policy_folder(folder):
            parser.error(f"--{name} {folder} is not a HF policy folder (no config.json)")
    return args


def policy_folder(folder: Path) -> bool:
    return (folder / "config.json").is_file()


def heldout_rng(seed: int, index: int) -> random.Random:
    """The random stream of held-out session `index` (see the module docstring for why it is disjoint)."""
    return random.Random(f"{HELDOUT_SEED_PREFIX}-{seed}-{index}")


class CoupledPolicy:
    """A LocalPolicy whose sampler is reseeded for every call from (seed, session, call number).

    Two policies evaluated this way draw the same random numbers at the same point of the same session, so
    where their next-token distributions agree they sample the same tokens (common random numbers): the
    paired differences then come from where the policies differ, not from the sampling noise of a shared
    stream that drifts apart after the first session that differs.
    """

    def __init__(self, local, seed: int) -> None:
        self.local = local
        self.seed = seed
        self.session = 0
        self.calls = 0

    def start_session(self, index: int) -> None:
        self.session, self.calls = index, 0

    def generate(self, prompt_text: str, session_id: str, agent_role: str = ROLE_SINGLE,
                 agent_id: str = MAIN_AGENT_ID) -> Completion:
        # The key is the call's place in the session, (seed, session, call number); calls run one at a time here.
        key = random.Random(f"{HELDOUT_SEED_PREFIX}-sampling-{self.seed}-{self.session}-{self.calls}")
        self.calls += 1
        self.local.reseed(key.getrandbits(63))
        return self.local.generate(prompt_text, session_id, agent_role, agent_id)


def run_heldout(folder: Path, n_tasks: int, seed: int, config) -> list[EvaluatedSession]:
    """Run held-out sessions 0..n_tasks-1 against the policy in `folder`, in task order."""
    from demo.product.feedback import DelayedFeedback
    from demo.product.local_policy import LocalPolicy
    from demo.product.memory_recorder import MemoryRecorder, RecordingPolicy, to_session_event
    from demo.product.session import run_session
    from demo.product.tasks import make_task
    from demo.product.user import SimulatedUser
    from liverl.rewards import SessionRecord, label

    demo = config.demo
    sampler = CoupledPolicy(LocalPolicy(folder, version="evaluated", temperature=demo.temperature,
                                        max_new_tokens=demo.max_new_tokens), seed)
    policy = RecordingPolicy(sampler)
    recorder, user, feedback = MemoryRecorder(), SimulatedUser(), DelayedFeedback()
    stats = []
    try:
        for index in range(n_tasks):
            sampler.start_session(index)
            rng = heldout_rng(seed, index)
            family = demo.families[index % len(demo.families)]
            task = make_task(family, rng, f"heldout-{family}-{seed}-{index}")
            stats.append(run_session(task, policy, recorder, rng, user=user, feedback=feedback, feedback_delay_s=0.0,
                                     user_id=f"heldout-{rng.randrange(100)}",
                                     subagents_call_policy=demo.subagents_call_policy))
    finally:
        feedback.close(send_pending=True)  # late feedback (kept or reverted edits) joins its session's label
    sessions = []
    for session in stats:
        events = tuple(to_session_event(e, i) for i, e in enumerate(recorder.of_session(session.session_id)))
        calls = tuple(policy.model_calls[session.session_id])
        record = SessionRecord(session.session_id, demo.tenant_id, events, calls)
        labelled = label(record, MAIN_AGENT_ID, config.rewards)
        row = {"signals": labelled.signals, "reward_components": labelled.components,
               "critical_steps": labelled.critical_steps, "policy_versions": ["evaluated"],
               "task_family": session.family}
        sessions.append(EvaluatedSession(session.family, session.reward, row))
    return sessions


def monitor_rates(sessions: Sequence[EvaluatedSession]) -> dict[str, float]:
    """The library's hacking rates ("rate.*", higher is worse) over these sessions."""
    from liverl.rewards import version_monitors

    figures = next(iter(version_monitors([s.row for s in sessions]).values()))
    return {name: value for name, value in figures.items() if name.startswith("rate.") and name not in UNUSED_MONITORS}


def side_figures(sessions: list[EvaluatedSession]) -> dict:
    """One policy's figures: reward mean and SE, per-family means, monitor rates and their SEs."""
    rewards = [s.reward for s in sessions]
    families = sorted({s.family for s in sessions})

    def monitors_of(indices: list[int]) -> dict[str, float]:
        return monitor_rates([sessions[i] for i in indices])

    return {
        "n": len(sessions),
        "reward_mean": statistics.fmean(rewards),
        "reward_se": statistics.stdev(rewards) / math.sqrt(len(rewards)),
        "reward_by_family": {f: statistics.fmean(s.reward for s in sessions if s.family == f) for f in families},
        "monitors": monitors_of(list(range(len(sessions)))),
        "monitors_se": jackknife_se(len(sessions), monitors_of),
    }


def paired_figures(candidate: list[EvaluatedSession], champion: list[EvaluatedSession]) -> dict:
    """Candidate minus champion over the same tasks, with jackknife SEs over tasks."""
    differences = [c.reward - b.reward for c, b in zip(candidate, champion, strict=True)]

    def change_of(indices: list[int]) -> dict[str, float]:
        cand = monitor_rates([candidate[i] for i in indices])
        champ = monitor_rates([champion[i] for i in indices])
        return {name: cand[name] - champ[name] for name in cand.keys() & champ.keys()}

    return {
        "n": len(differences),
        "reward_change": statistics.fmean(differences),
        "reward_change_se": statistics.stdev(differences) / math.sqrt(len(differences)),
        "monitors_change": change_of(list(range(len(differences)))),
        "monitors_change_se": jackknife_se(len(differences), change_of),
    }


def evaluate(candidate: Path, champion: Path, n_tasks: int, seed: int, config,
             log: Callable[[str], None] = lambda line: None, known: dict | None = None) -> dict:
    """The JSON object trainer/gate/online_eval.py reads (see the module docstring). `known`: weights digest -> held-out
    sessions of a policy already run (same tasks, seed and config), filled as policies are run."""
    runs = {}
    for name, folder in (("candidate", candidate), ("champion", champion)):
        started = time.perf_counter()
        digest = weights_digest(folder) if known is not None else None
        if digest is not None and digest in known:
            runs[name] = known[digest]
            how = "known weights, not run again"
        else:
            runs[name] = run_heldout(folder, n_tasks, seed, config)
            how = f"{time.perf_counter() - started:.1f}s"
            if digest is not None:
                known[digest] = runs[name]
        mean = statistics.fmean(s.reward for s in runs[name])
        log(f"evaluated {name} {folder} | {n_tasks} held-out tasks | reward {mean:.3f} | {how}")
    return {
        "reward": "outcome",
        "tasks": n_tasks,
        "seed": seed,
        "candidate": side_figures(runs["candidate"]),
        "champion": side_figures(runs["champion"]),
        "paired": paired_figures(runs["candidate"], runs["champion"]),
    }


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    from demo.config import DemoLiverlConfig
    from liverl.config import load_config

    config = load_config(args.config, schema=DemoLiverlConfig)
    torch.set_num_threads(args.threads)
    log = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    if args.serve:
        return serve(args.tasks, args.seed, config, log)
    result = evaluate(args.candidate, args.champion, args.tasks, args.seed, config, log=log)
    print(json.dumps(result, sort_keys=True), flush=True)
    return 0


def serve(n_tasks: int, seed: int, config, log: Callable[[str], None]) -> int:
    """One answer line per request line on stdin, until stdin ends. A request that cannot be evaluated gets an
    {"error": ...} line (which the trainer refuses, fail-closed), and the next request is served as usual."""
    known: dict[str, list[EvaluatedSession]] = {}
    for line in sys.stdin:
        if not line.strip():
            continue
        request_id = None
        try:
            request = json.loads(line)
            request_id = request.get("id") if isinstance(request, dict) else None
            folders = {name: Path(request[name]) for name in ("candidate", "champion")}
            bad = [f"{name} {folder}" for name, folder in folders.items() if not policy_folder(folder)]
            if bad:
                raise ValueError(f"not a HF policy folder (no config.json): {', '.join(bad)}")
            answer = evaluate(folders["candidate"], folders["champion"], n_tasks, seed, config, log, known)
        except Exception as error:  # noqa: BLE001 - the request fails, the evaluator goes on
            answer = {"error": f"{type(error).__name__}: {error}"}
        # The trainer reads only the answer carrying its request's id (trainer/gate/online_eval_process.py).
        print(json.dumps({**answer, "id": request_id}, sort_keys=True), flush=True)
    return 0


def weights_digest(folder: Path) -> str:
    """SHA-256 over the folder's config and weight files: equal digests, equal held-out sessions."""
    import hashlib

    digest = hashlib.sha256()
    for path in sorted(folder.iterdir()):
        if path.name == "config.json" or path.suffix in (".safetensors", ".bin"):
            digest.update(path.name.encode())
            with path.open("rb") as stream:
                while chunk := stream.read(1 << 20):
                    digest.update(chunk)
    return digest.hexdigest()
