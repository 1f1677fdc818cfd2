"""Held-out success of a chat policy folder: success per task family with 95 % Wilson intervals, and the
NLL of a fixed general text (how much general ability training has cost).

    python -m demo.evaluate heldout --folder .liverl/base-smollm2 [--tasks 210] [--seed 0]
        [--frozen DIR] [--adapter DIR] [--engine vllm|hf] [--dtype float32] [--json OUT] [--show 2]

The policy answers its own requests; orchestrator helpers (role subagent) are answered by the frozen folder
(default: the same one, which is right for the base; pass the base when evaluating a trained candidate).
With --adapter (a LoRA version of --folder), the same tasks are played twice, by the base and by the base with
the adapter merged into its weights (a second engine), the helpers always the base, and the result adds the
paired difference (adapter minus base) per family and overall with its 95 % interval. All
open requests of all tasks go to the engine in one batch per round, sampled at temperature 0.7, top-p 0.9, each
with a seed fixed by (seed, task, request), so a rerun on the same engine samples the same completions.
Prints one line per family and one JSON object (the last line, or --json).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from demo.evaluate.stats import paired_difference, wilson_interval
from demo.product.engines import TEMPERATURE, TOP_P, Generate, HfGenerate, VllmGenerate, request_seed
from demo.product.policy import ROLE_SUBAGENT
from demo.product.tasks.chat import GENERAL_TEXT
from demo.product.tasks.chat.base import ChatTask
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


def family_figures(tasks: Sequence[ChatTask]) -> dict[str, dict]:
    figures = {}
    for family in dict.fromkeys(task.family for task in tasks):
        outcomes = [task.outcome() for task in tasks if task.family == family]
        successes = sum(o.success for o in outcomes)
        low, high = wilson_interval(successes, len(outcomes))
        figures[family] = {"n": len(outcomes), "successes": successes, "rate": successes / len(outcomes),
                           "wilson95": [round(low, 4), round(high, 4)],
                           "mean_score": sum(o.score for o in outcomes) / len(outcomes)}
    return figures


def general_nll(folder: Path, text: str | None = None, adapter: Path | None = None) -> dict:
    """Mean negative log-likelihood (nats per token) of the shipped general text under the folder's model (with
    the peft adapter applied when one is given)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    text = GENERAL_TEXT.read_text() if text is None else text
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    if adapter is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(adapter)).eval()
    ids = torch.tensor([tokenizer(text)["input_ids"]])
    with torch.no_grad():
        loss = model(input_ids=ids, labels=ids).loss
    return {"nll": float(loss), "perplexity": math.exp(float(loss)), "tokens": int(ids.shape[1])}


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


def make_generate(engine: str, folder: Path, dtype: str, adapter: Path | None = None) -> Generate:
    if engine == "vllm":
        return VllmGenerate(folder, dtype)
    return HfGenerate(folder, adapter)


def evaluate(folder: Path, frozen: Path | None, n_tasks: int, seed: int, engine: str = "vllm",
             dtype: str = "float32", log: Callable[[str], None] = lambda line: None,
             adapter: Path | None = None) -> tuple[dict, list[ChatTask]]:
    """Held-out success of the folder's policy, or with `adapter` of base and adapter on the same tasks (paired)."""
    started = time.perf_counter()
    policy = make_generate(engine, folder, dtype)
    frozen_generate = policy if frozen is None or Path(frozen).resolve() == Path(folder).resolve() else \
        make_generate(engine, Path(frozen), dtype)
    loaded = time.perf_counter()
    result, tasks = _play(folder, policy, frozen_generate, n_tasks, seed, log, "base" if adapter else "policy")
    result.update({"folder": str(folder), "frozen": str(frozen or folder), "tasks": n_tasks, "seed": seed,
                   "engine": engine, "dtype": dtype, "temperature": TEMPERATURE, "top_p": TOP_P})
    if adapter is not None:
        with tempfile.TemporaryDirectory(prefix="liverl-merged-") as scratch:  # vLLM plays the merged weights
            played = merged_folder(folder, adapter, Path(scratch)) if engine == "vllm" else folder
            under = make_generate(engine, played, dtype, adapter)
            trained, trained_tasks = _play(folder, under, frozen_generate, n_tasks, seed, log, "adapter", adapter)
        result = {**result, "base": {k: result[k] for k in ("families", "general")}, "adapter_folder": str(adapter),
                  "adapter": trained, "paired": paired_figures(tasks, trained_tasks)}
        for family, figures in result["paired"].items():
            low, high = figures["ci95"]
            log(f"adapter - base {family:13s} {figures['difference']:+.3f}  95% [{low:+.3f}, {high:+.3f}]  "
                f"gained {figures['gained']}, lost {figures['lost']}")
        tasks = trained_tasks
    result["seconds"] = {"engine_start": loaded - started, "total": time.perf_counter() - started}
    return result, tasks


def _play(folder: Path, policy: Generate, frozen: Generate, n_tasks: int, seed: int, log, label: str,
          adapter: Path | None = None) -> tuple[dict, list[ChatTask]]:
    tasks = heldout_tasks(n_tasks, seed)
    rounds = run_tasks(tasks, policy, frozen, seed)
    families = family_figures(tasks)
    for family, f in families.items():
        log(f"{label:8s} {family:13s} {f['successes']:3d}/{f['n']:3d} = {f['rate']:.3f}  "
            f"95% [{f['wilson95'][0]:.3f}, {f['wilson95'][1]:.3f}]  mean score {f['mean_score']:.3f}")
    general = general_nll(folder, adapter=adapter)
    log(f"{label:8s} general text NLL {general['nll']:.4f} nats/token over {general['tokens']} tokens")
    return {"families": families, "general": general, "rounds": rounds}, tasks


def paired_figures(before: Sequence[ChatTask], after: Sequence[ChatTask]) -> dict[str, dict]:
    """Per family and overall ("all"): the paired success difference after - before on the same tasks."""
    figures = {}
    for family in [*dict.fromkeys(task.family for task in before), "all"]:
        pairs = [(b.outcome().success, a.outcome().success) for b, a in zip(before, after, strict=True)
                 if family in ("all", b.family)]
        figures[family] = paired_difference([b for b, _ in pairs], [a for _, a in pairs])
    return figures


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m demo.evaluate heldout", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--folder", type=Path, required=True, help="the policy's HF folder")
    parser.add_argument("--frozen", type=Path, default=None, help="the frozen helpers' folder (default: --folder)")
    parser.add_argument("--tasks", type=int, default=210, help="held-out tasks, the families in turn")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--adapter", type=Path, default=None,
                        help="a LoRA adapter folder of --folder: play base and adapter (merged), paired")
    parser.add_argument("--engine", choices=("vllm", "hf"), default="vllm")
    parser.add_argument("--dtype", default="float32", help="vLLM weight dtype")
    parser.add_argument("--json", type=Path, default=None, help="also write the result here")
    parser.add_argument("--show", type=int, default=0, help="print this many transcripts per family")
    args = parser.parse_args(argv)
    if not (args.folder / "config.json").is_file():
        parser.error(f"--folder {args.folder} is not a HF policy folder (no config.json)")
    log = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    result, tasks = evaluate(args.folder, args.frozen, args.tasks, args.seed, args.engine, args.dtype, log,
                             args.adapter)
    for family in result["families"]:
        for task in [t for t in tasks if t.family == family][: args.show]:
            log(f"--- {task.key}: {task.outcome().detail}\n" + "\n".join(f"[{r}] {t!r}" for r, t in task.transcript))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    print(json.dumps(result, sort_keys=True), flush=True)
    return 0
