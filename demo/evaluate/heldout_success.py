"""Held-out success of a chat policy folder, out-of-template and in-template apart, with 95 % intervals, and
how much general ability training has cost (the NLL of the gate's general text and of the separate forgetting set).

    python -m demo.evaluate heldout --folder .liverl/base-smollm2 [--tasks 70] [--seeds 3] [--seed S]
        [--split final|dev] [--frozen DIR] [--adapter DIR] [--engine vllm|hf] [--dtype float32] [--json OUT]
        [--show 2]

The tasks come from one held-out split (demo/product/tasks/chat/base.py): `final` (the default, what the demo
reports; no config is tuned on it) or `dev` (where configs are tuned). Each split holds out-of-template tasks
(templates training never drew) and in-template ones (training templates, keys training never drew); every figure
is given for each part apart, per family and overall, out-of-template first.

Every task is played under --seeds sampling seeds (--seed, --seed + 1, ...). --seed is drawn at random when left
out, printed and recorded, so no one draw of the base's sampling is what configs get tuned against, and a run can be
reproduced. The policy answers its own requests; orchestrator helpers (role subagent) are answered by the frozen
folder (default: the same one, which is right for the base; pass the base when evaluating a trained candidate).
With --adapter (a LoRA version of --folder), the same tasks are played under the same seeds twice, by the base and
by the base with the adapter merged into its weights (a second engine), the helpers always the base, and the result
adds the paired difference (adapter minus base) per group with its 95 % interval over tasks, and the forgetting
set's NLL ratio adapter / base with its bootstrap interval (demo/evaluate/forgetting.py). --adapter given more than
once (a line of versions, oldest first, each replacing the one before) plays every one under the same seeds; the
figures above are then of the last, and "chain" adds each adapter's paired difference with the one before it (the
first: with the base): whether any step of the line made the policy worse. All open requests of all
tasks go to the engine in one batch per round, sampled at temperature 0.7, top-p 0.9, each with a seed fixed by
(sampling seed, task, request), so a rerun on the same engine samples the same completions.
Prints one line per group and one JSON object (the last line, or --json).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from demo.evaluate import forgetting
from demo.evaluate.stats import paired_mean_difference, wilson_interval
from demo.product.engines import TEMPERATURE, TOP_P, Generate, HfGenerate, VllmGenerate, request_seed
from demo.product.policy import ROLE_SUBAGENT
from demo.product.tasks.chat import GENERAL_TEXT
from demo.product.tasks.chat.base import FINAL, HELDOUT_SPLITS, PARTS, ChatTask
from demo.product.tasks.chat.generate import heldout_tasks

# Written by the merge; everything else of the base folder (tokenizer, chat template) is copied beside them.
MERGED_FILES = ("config.json", "generation_config.json", "model.safetensors")


def run_tasks(tasks: Sequence[ChatTask], policy: Generate, frozen: Generate, seed: int = 0) -> int:
    """Drive every task to its end, batching each round's requests; returns the number of engine rounds."""
    rounds = 0
    while True:
        open_requests = [(index, number, request) for index, task in enumerate(tasks) if not task.done
                         for number, request in enumerate(task.requests())]
        if not open_requests:
            return rounds
        replies: dict[tuple[int, int], str] = {}
        for generate, wanted in ((policy, False), (frozen, True)):
            mine = [(i, n, r) for i, n, r in open_requests if (r.role == ROLE_SUBAGENT) == wanted]
            if mine:
                seeds = [request_seed(seed, i, rounds, n) for i, n, _ in mine]
                for (i, n, _), text in zip(mine, generate([r for _, _, r in mine], seeds), strict=True):
                    replies[(i, n)] = text
        for index, task in enumerate(tasks):
            if not task.done:
                count = len([1 for i, _, _ in open_requests if i == index])
                task.respond([replies[(index, n)] for n in range(count)])
        rounds += 1


def group_figures(plays: Sequence[Sequence[ChatTask]]) -> dict:
    """Success of one policy over the same tasks played under several sampling seeds (plays[s][i]: task i under
    seed s), per family, per part (out-of-template, in-template; per family and "all") and overall ("all").

    Each group: "n" tasks, "plays" (tasks x seeds), "successes" over the plays, "rate", a 95 % Wilson interval over
    the n tasks (each task counting its share of seeds that succeeded: conservative, since a task's plays are not
    independent), the rate under each seed ("per_seed") and their spread ("seed_sd"), and the mean score."""
    first = plays[0]

    def figures(indices: list[int]) -> dict:
        outcomes = [[seed_tasks[i].outcome() for i in indices] for seed_tasks in plays]
        per_seed = [sum(o.success for o in row) / len(indices) for row in outcomes]
        successes = sum(o.success for row in outcomes for o in row)
        low, high = wilson_interval(successes / len(plays), len(indices))
        return {"n": len(indices), "seeds": len(plays), "plays": len(indices) * len(plays), "successes": successes,
                "rate": successes / (len(indices) * len(plays)), "wilson95": [round(low, 4), round(high, 4)],
                "per_seed": per_seed, "seed_sd": statistics.stdev(per_seed) if len(per_seed) > 1 else 0.0,
                "mean_score": statistics.fmean(o.score for row in outcomes for o in row)}

    return _grouped([(task.family, task.part) for task in first], figures)


def _grouped(labels: Sequence[tuple[str, str]], figures: Callable[[list[int]], dict]) -> dict:
    """figures(task indices) for every family, part x family ("all" within a part) and overall ("all"), in the
    report's order; labels[i]: task i's (family, part)."""
    def where(family: str | None = None, part: str | None = None) -> list[int]:
        return [i for i, (f, p) in enumerate(labels) if family in (None, f) and part in (None, p)]

    families = list(dict.fromkeys(family for family, _ in labels))
    parts = {}
    for part in PARTS:
        if where(part=part):
            parts[part] = {**{f: figures(where(f, part)) for f in families if where(f, part)},
                           "all": figures(where(part=part))}
    return {"families": {f: figures(where(f)) for f in families}, "parts": parts, "all": figures(where())}


def outcomes(plays: Sequence[Sequence[ChatTask]]) -> list[dict]:
    """Per task: its key, family, part and success under each seed (the JSON's "outcomes", for pairing results of
    separate processes)."""
    return [{"key": task.key, "family": task.family, "part": task.part,
             "success": [seed_tasks[i].outcome().success for seed_tasks in plays]}
            for i, task in enumerate(plays[0])]


def paired_outcomes(before: Sequence[dict], after: Sequence[dict]) -> dict:
    """The paired success difference after - before (same tasks, same seeds; `outcomes` of each) for the groups of
    group_figures, with the task as the unit."""
    if [o["key"] for o in before] != [o["key"] for o in after]:
        raise ValueError("paired results must be of the same tasks in the same order (same split, tasks and seeds)")

    def difference(indices: list[int]) -> dict:
        return paired_mean_difference([before[i]["success"] for i in indices], [after[i]["success"] for i in indices])

    return _grouped([(o["family"], o["part"]) for o in before], difference)


def paired_figures(before: Sequence[Sequence[ChatTask]], after: Sequence[Sequence[ChatTask]]) -> dict:
    return paired_outcomes(outcomes(before), outcomes(after))


def load_model(folder: Path, adapter: Path | None = None):
    """The folder's model in float32 for scoring text (the peft adapter applied when one is given)."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    if adapter is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(adapter)).eval()
    return model


def general_nll(folder: Path, text: str | None = None, adapter: Path | None = None, model=None) -> dict:
    """Mean negative log-likelihood (nats per token) of the shipped general text (the gate's) under the folder's
    model (with the peft adapter applied when one is given)."""
    import torch
    from transformers import AutoTokenizer

    text = GENERAL_TEXT.read_text() if text is None else text
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    model = load_model(folder, adapter) if model is None else model
    ids = torch.tensor([tokenizer(text)["input_ids"]])
    with torch.no_grad():
        loss = model(input_ids=ids, labels=ids).loss
    return {"nll": float(loss), "perplexity": math.exp(float(loss)), "tokens": int(ids.shape[1])}


def text_figures(folder: Path, adapter: Path | None = None) -> dict:
    """The gate's general text and the separate forgetting set, one model load for both."""
    from transformers import AutoTokenizer

    model = load_model(folder, adapter)
    pieces = forgetting.chunks(AutoTokenizer.from_pretrained(str(folder)))
    return {"general": general_nll(folder, model=model),
            "forgetting": forgetting.arm_figures(pieces, forgetting.chunk_nll(model, pieces))}


def merged_folder(folder: Path, adapter: Path, out: Path) -> Path:
    """The folder's model with the peft adapter merged into its weights, saved to `out`: the same function as the
    base under the adapter, which vLLM plays at the base's speed (its CPU LoRA ops are slower)."""
    import shutil

    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    if not (Path(adapter) / "adapter_config.json").is_file():
        raise ValueError(f"--adapter {adapter} is not a peft adapter folder (no adapter_config.json)")
    base = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
    PeftModel.from_pretrained(base, str(adapter)).merge_and_unload().save_pretrained(out, safe_serialization=True)
    for path in Path(folder).iterdir():
        if path.is_file() and path.name not in MERGED_FILES and not path.name.startswith("liverl_"):
            shutil.copy2(path, out / path.name)
    return out


def make_generate(engine: str, folder: Path, dtype: str, adapter: Path | None = None) -> VllmGenerate | HfGenerate:
    if engine == "vllm":
        return VllmGenerate(folder, dtype)
    return HfGenerate(folder, adapter)


def sampling_seeds(seed: int, count: int) -> list[int]:
    """The sampling seeds a run plays its tasks under: seed, seed + 1, ... (rerun a run with its --seed)."""
    return [seed + offset for offset in range(count)]


def fresh_seed() -> int:
    """A run's sampling seed when none is given: drawn at random, so no one base draw is tuned against."""
    import secrets

    return secrets.randbelow(2**31 - 16)


def evaluate(folder: Path, frozen: Path | None, n_tasks: int, seed: int, engine: str = "vllm",
             dtype: str = "float32", log: Callable[[str], None] = lambda line: None,
             adapters: Sequence[Path] = (), seeds: int = 3, split: str = FINAL) -> tuple[dict, list[ChatTask]]:
    """Held-out success of the folder's policy on n_tasks of the split, each played under `seeds` sampling seeds
    from `seed`; with `adapters`, of the base and each adapter on the same tasks and seeds (paired)."""
    adapters = [Path(a) for a in adapters]
    adapter = adapters[-1] if adapters else None
    started = time.perf_counter()
    policy = make_generate(engine, folder, dtype)
    frozen_generate = policy if frozen is None or Path(frozen).resolve() == Path(folder).resolve() else \
        make_generate(engine, Path(frozen), dtype)
    loaded = time.perf_counter()
    plan = {"split": split, "tasks": n_tasks, "seed": seed, "sampling_seeds": sampling_seeds(seed, seeds)}
    log(f"held-out {split}: {n_tasks} tasks x {seeds} sampling seeds {plan['sampling_seeds']} "
        f"(reproduce with --seed {seed} --seeds {seeds} --split {split})")
    repeated = repeated_keys(heldout_tasks(n_tasks, split=split))  # the plan's tasks, as every arm plays them
    for group, (count, distinct) in repeated.items():
        log(f"held-out {split}: {group} has {count} tasks over {distinct} distinct keys: the split holds no more, so "
            "some are played twice and counted as two tasks (its interval is somewhat too narrow)")
    result, plays = _play(folder, policy, frozen_generate, plan, log, "base" if adapter else "policy")
    result.update({**plan, "repeated_keys": repeated, "folder": str(folder),
                   "frozen": str(frozen or folder), "engine": engine, "dtype": dtype, "temperature": TEMPERATURE,
                   "top_p": TOP_P})
    if adapter is not None:
        chain, previous, previous_label = [], plays, "base"
        for number, each in enumerate(adapters, start=1):
            label = "adapter" if len(adapters) == 1 else f"adapter{number}"
            trained, trained_plays = _play_adapter(folder, each, engine, dtype, frozen_generate, plan, log, label)
            step = paired_figures(previous, trained_plays)
            chain.append({"adapter_folder": str(each), "figures": trained, "paired_with_previous": step})
            if len(adapters) > 1:  # with one adapter its step is the adapter - base figures logged below
                low, high = step["all"]["ci95"]
                log(f"{label} - {previous_label} all tasks {step['all']['difference']:+.3f}  "
                    f"95% [{low:+.3f}, {high:+.3f}]")
            previous, previous_label = trained_plays, label
        if len(adapters) > 1:
            result["chain"] = chain
        result = {**result, "base": {k: result[k] for k in ARM_FIGURES}, "adapter_folder": str(adapter),
                  "adapter": trained, "paired": paired_figures(plays, trained_plays),
                  "forgetting_ratio": forgetting.ratio_figures(result["forgetting"], trained["forgetting"])}
        for part, groups in result["paired"]["parts"].items():
            for family, figures in groups.items():
                low, high = figures["ci95"]
                log(f"adapter - base {part:15s} {family:13s} {figures['difference']:+.3f}  95% [{low:+.3f}, "
                    f"{high:+.3f}]  tasks gained {figures['gained']}, lost {figures['lost']}")
        log(forgetting.describe(result["forgetting_ratio"]))
        plays = trained_plays
    result["seconds"] = {"engine_start": loaded - started, "total": time.perf_counter() - started}
    return result, plays[0]


ARM_FIGURES = ("families", "parts", "all", "general", "forgetting", "outcomes")


def repeated_keys(tasks: Sequence[ChatTask]) -> dict[str, tuple[int, int]]:
    """'<part> <family>' -> (tasks, distinct keys) for every group asked more tasks than its split has keys
    (heldout_tasks then plays some twice)."""
    groups: dict[str, list[str]] = {}
    for task in tasks:
        groups.setdefault(f"{task.part} {task.family}", []).append(task.key)
    return {group: (len(keys), len(set(keys))) for group, keys in groups.items() if len(set(keys)) < len(keys)}


def _play_adapter(folder: Path, adapter: Path, engine: str, dtype: str, frozen: Generate, plan: dict, log,
                  label: str) -> tuple[dict, list[list[ChatTask]]]:
    """The plan played by the base under one adapter: vLLM plays the adapter merged into a copy of the base, its
    engine (and the copy) gone before the next adapter's starts."""
    with tempfile.TemporaryDirectory(prefix="liverl-merged-") as scratch:
        played = merged_folder(folder, adapter, Path(scratch)) if engine == "vllm" else folder
        under = make_generate(engine, played, dtype, adapter)
        try:
            return _play(folder, under, frozen, plan, log, label, adapter)
        finally:
            under.close()


def _play(folder: Path, policy: Generate, frozen: Generate, plan: dict, log, label: str,
          adapter: Path | None = None) -> tuple[dict, list[list[ChatTask]]]:
    """Every task of the plan under each of its sampling seeds (a fresh copy of the tasks per seed)."""
    plays, rounds = [], 0
    for sampling_seed in plan["sampling_seeds"]:
        tasks = heldout_tasks(plan["tasks"], split=plan["split"])
        rounds += run_tasks(tasks, policy, frozen, sampling_seed)
        plays.append(tasks)
    figures = group_figures(plays)
    for part, groups in figures["parts"].items():
        for family, f in groups.items():
            seeds = ", ".join(f"{rate:.3f}" for rate in f["per_seed"])
            log(f"{label:8s} {part:15s} {family:13s} {f['successes']:3d}/{f['plays']:3d} = {f['rate']:.3f}  "
                f"95% [{f['wilson95'][0]:.3f}, {f['wilson95'][1]:.3f}]  per seed {seeds}")
    texts = text_figures(folder, adapter)
    log(f"{label:8s} general text NLL {texts['general']['nll']:.4f} nats/token over {texts['general']['tokens']} "
        f"tokens; forgetting set {texts['forgetting']['nll']:.4f} over {texts['forgetting']['tokens']}")
    return {**figures, **texts, "outcomes": outcomes(plays), "rounds": rounds}, plays


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m demo.evaluate heldout", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--folder", type=Path, required=True, help="the policy's HF folder")
    parser.add_argument("--frozen", type=Path, default=None, help="the frozen helpers' folder (default: --folder)")
    parser.add_argument("--tasks", type=int, default=70, help="held-out tasks, the families in turn")
    parser.add_argument("--seed", type=int, default=None,
                        help="the first sampling seed (default: drawn at random, printed and recorded)")
    parser.add_argument("--seeds", type=int, default=3, help="sampling seeds each task is played under")
    parser.add_argument("--split", choices=HELDOUT_SPLITS, default=FINAL,
                        help="dev: the held-out tasks configs are tuned on; final: the demo's, never tuned on")
    parser.add_argument("--adapter", type=Path, action="append", default=[],
                        help="a LoRA adapter folder of --folder: play base and adapter (merged), paired; repeated: "
                             "a line of versions, oldest first, each also paired with the one before it")
    parser.add_argument("--engine", choices=("vllm", "hf"), default="vllm")
    parser.add_argument("--dtype", default="float32", help="vLLM weight dtype")
    parser.add_argument("--json", type=Path, default=None, help="also write the result here")
    parser.add_argument("--show", type=int, default=0, help="print this many transcripts per family")
    args = parser.parse_args(argv)
    if not (args.folder / "config.json").is_file():
        parser.error(f"--folder {args.folder} is not a HF policy folder (no config.json)")
    if args.seeds < 1 or args.tasks < 1:
        parser.error("--tasks and --seeds must be at least 1")
    log = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    seed = fresh_seed() if args.seed is None else args.seed
    for adapter in args.adapter:
        if not (adapter / "adapter_config.json").is_file():
            parser.error(f"--adapter {adapter} is not a peft adapter folder (no adapter_config.json)")
    result, tasks = evaluate(args.folder, args.frozen, args.tasks, seed, args.engine, args.dtype, log,
                             args.adapter, args.seeds, args.split)
    for family in result["families"]:
        for task in [t for t in tasks if t.family == family][: args.show]:
            log(f"--- {task.key}: {task.outcome().detail}\n" + "\n".join(f"[{r}] {t!r}" for r, t in task.transcript))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    print(json.dumps(result, sort_keys=True), flush=True)
    return 0
