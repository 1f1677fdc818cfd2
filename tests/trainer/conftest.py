"""Trainer fixtures: trajectory rows committed like the pipelines commit them, and a registered base policy."""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path

import pytest

from liverl.config import LiverlConfig
from liverl.contracts import names

WORDS = ["edit", "search", "ask", "fix", "file", "done"]


def make_row(trajectory_id: str, batch_id: str, token_ids: list[int], loss_mask: list[int],
             behaviour_logprobs: list[float], *, reward: float = 1.0, task_family: str = "coding",
             task_id: str = "", policy_versions=("1",), first_served_ms: int | None = None,
             agent_role: str = "single", signals: dict | None = None,
             sampling: tuple[float, float, int] | None = (1.0, 1.0, 0)) -> dict:
    """sampling: the one call's (temperature, top_p, top_k), recorded as serving records it; None: a row
    without the columns (sampling unknown: its tokens are unscorable)."""
    now = int(time.time() * 1000) if first_served_ms is None else first_served_ms
    columns = {} if sampling is None else {"span_temperature": [sampling[0]], "span_top_p": [sampling[1]],
                                           "span_top_k": [sampling[2]]}
    return columns | dict(
        trajectory_id=trajectory_id, session_id=f"s-{trajectory_id}", tenant_id="t1", task_family=task_family,
        task_id=task_id, agent_role=agent_role, agent_id="main", parent_agent_id=None,
        policy_versions=list(policy_versions), span_starts=[0], span_ends=[len(token_ids)],
        span_policy_versions=[policy_versions[-1]] if policy_versions else [],
        token_ids=token_ids, loss_mask=loss_mask, behaviour_logprobs=behaviour_logprobs,
        reward_components=[("outcome", float(reward))], reward_config_version="rewards-v1",
        signals=list((signals or {"turns": 1.0, "tool_calls": 1.0}).items()), critical_steps=1, num_turns=1,
        num_model_calls=1, session_start_ms=now, session_end_ms=now + 1, first_served_ms=now,
        distilled_at_ms=now, batch_id=batch_id, schema_version=1, event_date="2026-11-30",
    )


def step_sizes(uri: str, micro_batch_tokens: int, accumulation_steps: int) -> tuple[list[int], dict[str, int]]:
    """Build every step from the table at uri; returns trajectories per step and what was marked trained."""
    from liverl.config.trainer import TrainerConfig
    from liverl.io.table_history import TableHistory
    from trainer.io.row_stream import RowStream, StreamPosition
    from trainer.step.builder import build_step

    config = TrainerConfig()
    config.gate.holdout_fraction = 0.0
    config.deepspeed.micro_batch_tokens = micro_batch_tokens
    config.deepspeed.gradient_accumulation_steps = accumulation_steps
    stream = RowStream(TableHistory(uri), StreamPosition(-1, 0, True))
    trained: dict[str, int] = {}
    sizes = []
    while not (plan := build_step(stream, trained, "1", 0, config, say=lambda *_: None)).empty:
        sizes.append(len(plan.trajectories))
    return sizes, trained


def commit_batch(uri: str, rows: list[dict], batch_id: str, sequence: int, offsets: dict | None = None) -> None:
    """One commit = one batch, with the metadata and app transaction of docs/architecture.md, contract 3."""
    import pyarrow as pa
    from deltalake import CommitProperties, Transaction, write_deltalake

    from liverl.contracts.table_schema import TABLE_SCHEMA_VERSION, TRAJECTORY_PARTITION_BY, TRAJECTORY_SCHEMA

    table = pa.Table.from_pylist([{**row, "batch_id": batch_id} for row in rows], schema=TRAJECTORY_SCHEMA)
    metadata = {
        names.COMMIT_BATCH_ID: batch_id,
        names.COMMIT_KAFKA_OFFSETS: json.dumps(offsets or {"events": {"0": [sequence * 10, sequence * 10 + 10]}}),
        names.COMMIT_SCHEMA_VERSION: str(TABLE_SCHEMA_VERSION),
    }
    write_deltalake(
        uri, table, mode="append", partition_by=TRAJECTORY_PARTITION_BY,
        commit_properties=CommitProperties(
            custom_metadata=metadata, app_transactions=[Transaction(names.DISTILL_APP_ID, sequence)]
        ),
    )


class TrajectoryFactory:
    """Rows whose behaviour logprobs are the base policy's own (so the first steps are on-policy)."""

    def __init__(self, policy_dir: Path):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.model = AutoModelForCausalLM.from_pretrained(policy_dir, dtype=torch.float32).eval()
        self.tokenizer = AutoTokenizer.from_pretrained(policy_dir)

    def row(self, trajectory_id: str, text: str, reward: float, **kwargs) -> dict:
        import torch

        ids = self.tokenizer(text)["input_ids"]
        with torch.no_grad():
            logits = self.model(input_ids=torch.tensor([ids])).logits[0]
        logp = torch.log_softmax(logits[:-1], -1).gather(-1, torch.tensor(ids[1:])[:, None]).squeeze(-1)
        prompt = 2  # the first two tokens are the "user" prompt: not sampled by the policy
        mask = [0] * prompt + [1] * (len(ids) - prompt)
        behaviour = [0.0] * prompt + [float(x) for x in logp[prompt - 1:]]
        return make_row(trajectory_id, "", ids, mask, behaviour, reward=reward, **kwargs)

    def segment_logprobs(self, ids: list[int]) -> list[float]:
        """log π(token_t | tokens_<t) of one sequence scored on its own, as serving sampled it; 0 for token 0."""
        import torch

        with torch.no_grad():
            logits = self.model(input_ids=torch.tensor([ids])).logits[0]
        logp = torch.log_softmax(logits[:-1], -1).gather(-1, torch.tensor(ids[1:])[:, None]).squeeze(-1)
        return [0.0] + [float(x) for x in logp]

    def segmented_row(self, trajectory_id: str, texts: list[str], reward: float, prompt: int = 2, **kwargs) -> dict:
        """One trajectory of len(texts) segments (context rewritten between them), laid out as the pipelines
        chain them: each segment's first `prompt` tokens are context, the rest its completion with behaviour
        logprobs of the segment scored on its own."""
        tokens, mask, behaviour, starts = [], [], [], []
        for text in texts:
            ids = self.tokenizer(text)["input_ids"]
            starts.append(len(tokens))
            tokens += ids
            mask += [0] * prompt + [1] * (len(ids) - prompt)
            behaviour += [0.0] * prompt + self.segment_logprobs(ids)[prompt:]
        row = make_row(trajectory_id, "", tokens, mask, behaviour, reward=reward, **kwargs)
        return row | {"segment_starts": starts}

    def batch(self, prefix: str, n: int, **kwargs) -> list[dict]:
        """n trajectories: "good" ones (fix file done) rewarded, "bad" ones (ask ask) not."""
        rows = []
        for i in range(n):
            good = i % 2 == 0
            text = "fix the file : edit file done" if good else "fix the file : ask ask ask"
            rows.append(self.row(f"{prefix}-{i:03d}", text, 1.0 if good else 0.0, **kwargs))
        return rows


@pytest.fixture(scope="session")
def trajectories(tiny_policy_dir) -> TrajectoryFactory:
    return TrajectoryFactory(tiny_policy_dir)


def trainer_config(stack: LiverlConfig, tmp_path: Path, **trainer_overrides) -> LiverlConfig:
    """The stack's config with a registered model, table and checkpoints of this test's own."""
    config = stack.model_copy(deep=True)
    config.mlflow.registered_model = f"policy-{uuid.uuid4().hex[:8]}"
    config.table.trajectories_uri = str(tmp_path / "table")
    config.trainer.checkpoint_dir = tmp_path / "checkpoints"
    config.trainer.deepspeed.micro_batch_tokens = 24  # 3 trajectories a micro-batch
    config.trainer.gate.holdout_fraction = 0.25
    # A few held-out sessions: the gate's evidence floors would defer every candidate (trainer/gate/statistics.py);
    # these tests are about the loop's plumbing; the error rates are tests/trainer/test_gate_error_rates.py's.
    config.trainer.gate.min_effective_sessions = 2.0
    config.trainer.gate.max_reward_drop = 0.5  # the demo's: at 0.01 three sessions can never show a candidate
    config.rewards.monitors.min_trajectories = 0
    for key, value in trainer_overrides.items():
        setattr(config.trainer, key, value)
    return config


def cli_overrides(config: LiverlConfig) -> list[str]:
    """The same config as `liverl` command-line overrides, for trainer subprocesses."""
    tc = config.trainer
    return [
        "--mlflow.tracking_uri", config.mlflow.tracking_uri,
        "--mlflow.registered_model", config.mlflow.registered_model,
        "--table.trajectories_uri", config.table.trajectories_uri,
        "--trainer.checkpoint_dir", str(tc.checkpoint_dir),
        "--trainer.steps_per_version", str(tc.steps_per_version),
        "--trainer.deepspeed.micro_batch_tokens", str(tc.deepspeed.micro_batch_tokens),
        "--trainer.gate.holdout_fraction", str(tc.gate.holdout_fraction),
    ]


def subprocess_env() -> dict:
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ)
    env.setdefault("TORCH_EXTENSIONS_DIR", str(root / ".venv" / "torch-extensions"))
    env["PYTHONUNBUFFERED"] = "1"
    for key in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)  # an in-process trainer of another test set them: the child is its own world
    return env


def run_trainer(argv: list[str], kill_after: str | None = None, timeout_s: float = 600) -> list[str]:
    """Run a trainer command line (one process, or a launcher and its ranks) in a process group of its own and
    return its output lines; with kill_after, SIGKILL the whole group right after a line starting so."""
    import signal
    import subprocess
    import threading

    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env=subprocess_env(), start_new_session=True)

    def kill() -> None:
        os.killpg(process.pid, signal.SIGKILL)

    watchdog = threading.Timer(timeout_s, kill)  # never hang the suite
    watchdog.start()
    lines = []
    killed = False
    try:
        for line in process.stdout:
            lines.append(line.rstrip())
            if kill_after and not killed and line.startswith(kill_after):
                kill()
                killed = True  # read on to the end: lines written before the kill landed (a step, a checkpoint)
        process.wait()
    finally:
        watchdog.cancel()
        process.stdout.close()
    assert process.returncode == (-9 if kill_after else 0), "\n".join(lines)
    return lines
