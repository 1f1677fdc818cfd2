"""What every whole-loop test sets up the same way: the demo's config on the test's own folder and ports, ended on
a count of served versions with the clock only as a ceiling, and the real gate told to pass any finite candidate."""

from __future__ import annotations

from pathlib import Path

from demo.config import DemoLiverlConfig
from demo.run import run_demo
from tests.conftest import free_stage_ports, module_folder, stack_config

COUNT_ENDED_THE_RUN = "demo.run.stop_after_versions"  # the setting the run's last line names when the count ends it
BASE_FIT_STEPS = 100  # of the toy demo's 800: calls that mostly parse; learning is not what these tests judge
TOY_DEMO_CONFIG = Path(__file__).resolve().parents[2] / "configs" / "demo.toml"
TOY_CEILING_S = 20 * 60.0  # traffic time only; the count ends a toy loop long before on a healthy machine


def loop_config(request, tmp_path_factory, name: str, config_file: Path, *, ceiling_s: float,
                stop_after_versions: int, seed: int) -> DemoLiverlConfig:
    """`config_file` on a stack of this module's own, ended after `stop_after_versions` served trained versions
    or `ceiling_s` of traffic, whichever comes first, with the gate passing any finite candidate."""
    config = stack_config(module_folder(request, tmp_path_factory, name), storage="disk", config_file=config_file,
                          schema=DemoLiverlConfig)
    free_stage_ports(config)
    config.demo.duration_s = ceiling_s
    config.demo.run.stop_after_versions = stop_after_versions
    config.demo.seed = seed
    permissive_gate(config)
    return config


def permissive_gate(config: DemoLiverlConfig) -> None:
    """The real gate code, told to pass any candidate with finite weights and figures: whether a candidate deserves
    promotion is judged in tests/trainer, not by a loop of a few minutes on a busy machine."""
    gate = config.trainer.gate
    gate.online_eval_command = None  # the held-out product play: judged by tests/trainer and tests/demo
    gate.confidence_z = 0.0
    gate.max_kl = gate.max_nll_increase = gate.max_reward_drop = 1e6
    gate.min_effective_fraction = 1e-9
    gate.min_effective_sessions = 2.0  # the fewest the reward test takes: no deferral waiting for ten
    gate.max_drift_alerts = 10**6
    config.rewards.monitors.thresholds = {}
    config.rewards.monitors.min_trajectories = 0


def run_printing(config: DemoLiverlConfig):
    """Run the demo, printing its progress (pytest shows it for a failure) and keeping the lines for assertions."""
    lines: list[str] = []
    result = run_demo(config, say=lambda line: (lines.append(line), print(line, flush=True)))
    return result, lines


def ended_on_its_count(lines: list[str]) -> bool:
    return any(COUNT_ENDED_THE_RUN in line for line in lines)


def fit_brief_base_policy(config: DemoLiverlConfig) -> None:
    """The toy demo reuses a base policy it finds in <data_dir>/base-policy: fit one briefly, on one thread."""
    import torch

    from demo.policy import bootstrap_base_policy

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        bootstrap_base_policy(config.stack.data_dir / "base-policy", seed=config.demo.seed, fit_steps=BASE_FIT_STEPS)
    finally:
        torch.set_num_threads(threads)
