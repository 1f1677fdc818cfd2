"""Chaos: kill -9 every stage at random points under live traffic; nothing acknowledged is lost.

The real stack (broker on disk storage, MLflow), the four stages as their own processes (`liverl capture`,
`liverl serve` on the light hf engine, `liverl distill --follow`, `liverl train --follow`), the demo product
for a few minutes of traffic. A seeded monkey kills each stage by the PID it started (each at least once)
and restarts it after a short pause. Then the pipeline drains, and every event the capture service
acknowledged to the product is reconciled: in the trajectory table exactly once (through its session), or
in a counted dead letter; no trajectory id twice; every trained version's lineage names committed table
versions. Model calls that died with serving before answering are not acknowledged and do not count.
"""

from __future__ import annotations

import random
import re
import time
from collections import Counter
from pathlib import Path

import pytest

from demo.config import DemoLiverlConfig
from demo.services import run_stage
from demo.stage_env import config_environment
from liverl.io.processes import port_open, wait_until
from tests.conftest import free_stage_ports, stack_config
from tests.e2e.chaos.ack_proxy import AckProxy
from tests.e2e.chaos.drain import wait_drained
from tests.e2e.chaos.lineage import check_lineage
from tests.e2e.chaos.monkey import ChaosMonkey, kill_schedule
from tests.e2e.chaos.reconcile import index_dead_letters, read_delta, reconcile
from tests.e2e.chaos.stages import ChaosStage, serving_version

pytestmark = pytest.mark.slow

SEED = 12
TRAFFIC_S = 150.0
KILL_WINDOW_S = (10.0, TRAFFIC_S - 25.0)  # the last kill leaves time for a restart under traffic
EXTRA_KILLS = 2  # beyond one per stage
MIN_GAP_S = 40.0  # between two kills of one stage: it restarts and works before dying again
PAUSE_S = (1.0, 5.0)  # dead time before the restart
DRAIN_TIMEOUT_S = 150.0
TRAINED_VERSION_TIMEOUT_S = 90.0
STAGE_READY_TIMEOUT_S = 180.0
BASE_FIT_STEPS = 100  # calls that mostly parse; learning is not what this test judges
DEMO_CONFIG = Path(__file__).resolve().parents[2] / "configs" / "demo.toml"
STAGES = {"capture": ["capture"], "serve": ["serve"], "distill": ["distill", "--follow"], "train": ["train", "--follow"]}


def chaos_config(data_dir: Path) -> DemoLiverlConfig:
    """The demo's config on fresh ports, the light engine, and clocks short enough to drain in a minute."""
    config = stack_config(data_dir, storage="disk", config_file=DEMO_CONFIG, schema=DemoLiverlConfig)
    free_stage_ports(config)
    config.serving.engine = "hf"
    config.serving.min_swap_interval_s = 10.0
    config.serving.probation_s = 10.0
    config.pipelines.follow_interval_s = 3.0
    config.pipelines.reward_horizon_s = 6.0  # feedback comes 2 s after a session's end
    config.pipelines.idle_timeout_s = 30.0
    config.trainer.steps_per_version = 1  # a version per step: registrations happen between the kills
    config.trainer.minutes_per_version = 0.5
    config.trainer.follow_interval_s = 2.0
    config.trainer.deepspeed.gradient_accumulation_steps = 1
    config.demo.seed = SEED
    config.demo.run.sessions_per_s = 1.5
    config.demo.run.feedback_delay_s = 2.0
    config.demo.policy_timeout_s = 10.0
    return config


def say(line: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {line}", flush=True)


def error_status(error: str) -> str:
    """"UNAVAILABLE" from a failed session's "_InactiveRpcError: ... status = StatusCode.UNAVAILABLE ..."."""
    found = re.search(r"StatusCode\.(\w+)", error)
    return found.group(1) if found else error[:60]


def fit_base_policy(out: Path) -> Path:
    """The demo's base policy, fitted briefly on one thread (the stack's processes need the other core)."""
    import torch

    from demo.policy import bootstrap_base_policy

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return bootstrap_base_policy(out, seed=SEED, fit_steps=BASE_FIT_STEPS)
    finally:
        torch.set_num_threads(threads)


def start_stages(config: DemoLiverlConfig, logs: Path, env: dict[str, str], stages: dict[str, ChaosStage]) -> None:
    """capture and serve, ready; then distill and train. Each lands in `stages` at once, so a failure stops it."""
    for name in ("capture", "serve"):
        stages[name] = ChaosStage(name, STAGES[name], logs, env)
    capture, serve = stages["capture"].current, stages["serve"].current
    wait_until(lambda: port_open(config.ingest.host, config.ingest.grpc_port), STAGE_READY_TIMEOUT_S, "capture",
               capture.process, capture.log)
    wait_until(lambda: bool(serving_version(config)), STAGE_READY_TIMEOUT_S, "serve", serve.process, serve.log,
               interval_s=1.0)
    for name in ("distill", "train"):
        stages[name] = ChaosStage(name, STAGES[name], logs, env)
    say(f"      stages up: {', '.join(f'{n} pid {s.pid}' for n, s in stages.items())}")


def test_every_acknowledged_event_survives_kill_9_of_every_stage(tmp_path):
    from demo.product.configured import capture_client, grpc_policy, run_configured_traffic
    from infra.embedded.stack import down, up

    config = chaos_config(tmp_path / "data")
    logs = tmp_path / "logs"
    env = config_environment(config)
    stages: dict[str, ChaosStage] = {}
    proxy = client = policy = monkey = None
    try:
        up(config, say=lambda line: say(f"      {line}"))
        base = fit_base_policy(tmp_path / "base-policy")
        say("      base policy fitted")
        run_stage("train-init", ["train", "--init-from", str(base)], logs, STAGE_READY_TIMEOUT_S, env)
        start_stages(config, logs, env, stages)
        proxy = AckProxy(f"{config.ingest.host}:{config.ingest.grpc_port}",
                         {token: tenant for tenant, token in config.ingest.tenant_tokens.items()}).start()
        config.ingest.grpc_port = proxy.port  # the product records through the ledger (stages keep their env)
        client = capture_client(config, tmp_path / "sdk-spool")
        policy = grpc_policy(config)
        schedule = kill_schedule(random.Random(SEED), list(STAGES), KILL_WINDOW_S, EXTRA_KILLS, MIN_GAP_S, PAUSE_S)
        say(f"      kill schedule: {', '.join(f'{k.stage}@{k.at_s:.0f}s' for k in schedule)}")
        monkey = ChaosMonkey(stages, schedule, say).start()
        traffic = run_configured_traffic(config, policy, client, duration_s=TRAFFIC_S)
        monkey.stop()  # after the restart in progress: every stage is up for the drain
        assert monkey.error is None, f"the chaos monkey failed: {monkey.error!r}"
        for stage in stages.values():
            stage.revive_if_exited()  # recorded as unexpected; restarted so the drain still runs
        say(f"      traffic: {len(traffic.sessions)} sessions, {len(traffic.errors)} failed "
            f"({dict(Counter(error_status(e) for e in traffic.errors))}), "
            f"feedback {traffic.feedback_sent} sent / {traffic.feedback_failed} failed")

        assert client.flush(timeout_s=60.0), f"the SDK could not deliver everything: {client.stats()}"
        sdk = client.stats()
        say(f"      SDK: {sdk}")
        say(f"      ledger: {len(proxy.acked)} events acknowledged, "
            f"{sum(n - 1 for n in proxy.times_acked.values())} re-acknowledged resends, "
            f"failed calls {dict(proxy.failed_calls)}")
        waiting, behind = wait_drained(config, proxy, DRAIN_TIMEOUT_S, say)
        wait_until(lambda: check_lineage(config.mlflow.tracking_uri, config.mlflow.registered_model,
                                         config.table.trajectories_uri).trained,
                   TRAINED_VERSION_TIMEOUT_S, "a trained version", stages["train"].current.process,
                   stages["train"].current.log, interval_s=3.0)

        letters = index_dead_letters(read_delta(config.table.dead_letters_uri), config.kafka.session_events_topic)
        rows = read_delta(config.table.trajectories_uri,
                          ["trajectory_id", "tenant_id", "session_id", "agent_id", "num_turns", "signals"])
        result = reconcile(dict(proxy.acked), rows, letters)
        lineage = check_lineage(config.mlflow.tracking_uri, config.mlflow.registered_model,
                                config.table.trajectories_uri)
        kills = {name: stage.kills for name, stage in stages.items()}
        say(f"      reconciliation: {result.line()}")
        say(f"      lineage: {lineage.line()} | kills per stage {kills}")
        for problem in (result.problems() + lineage.problems)[:40]:
            say(f"        {problem}")

        assert all(n >= 1 for n in kills.values()), f"every stage must be killed at least once: {kills}"
        unexpected = [line for stage in stages.values() for line in stage.unexpected_exits]
        assert not unexpected, "stages exited by themselves:\n" + "\n\n".join(unexpected)
        assert not proxy.mismatches, f"capture answers that miscount their events: {proxy.mismatches[:5]}"
        assert sdk["dropped"] == sdk["dead_lettered"] == sdk["rejected"] == 0, f"the SDK lost or was refused events: {sdk}"
        assert waiting == 0 and behind == 0, (
            f"not drained after {DRAIN_TIMEOUT_S:.0f} s: {waiting} sessions not distilled, {behind} records behind")
        assert result.acknowledged > 0 and result.count_checks > 0
        assert result.acknowledged == result.in_table + result.dead_lettered + len(result.lost)
        assert not result.lost, f"{len(result.lost)} acknowledged events lost, e.g. {result.lost[:5]}"
        assert not result.duplicate_trajectories, result.duplicate_trajectories[:5]
        assert not result.count_mismatches, result.count_mismatches[:5]
        assert lineage.trained and not lineage.problems, lineage.problems
    finally:
        if monkey is not None:
            monkey.stop()
        for closable in (client, policy):
            if closable is not None:
                closable.close()
        if proxy is not None:
            proxy.stop()
        for stage in reversed(list(stages.values())):
            stage.stop()
        down(config, say=lambda *_: None)
