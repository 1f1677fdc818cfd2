"""The trainer reads sealed rows: their exact token ids, opened with the key store; a forgotten subject's row is
skipped and counted, never a crash."""

from __future__ import annotations

from liverl.config.trainer import TrainerConfig
from liverl.contracts.trajectory_row import TrajectoryRow
from liverl.io.table_history import TableHistory
from liverl.privacy.keystore import FileKeyStore
from liverl.privacy.row_sealing import RowOpener, RowSealer
from tests.trainer.conftest import commit_batch, make_row
from trainer.gate.holdout import held_out_rows
from trainer.io.row_stream import RowStream, StreamPosition
from trainer.step.builder import build_step

TOKENS = [[5, 6, 7, 8], [9, 10, 11, 12, 13], [14, 15, 16]]


def sealed_table(tmp_path) -> tuple[str, FileKeyStore, list[dict]]:
    store = FileKeyStore(tmp_path / "keys")
    sealer = RowSealer(store)
    rows = [make_row(f"t{i}", "", ids, [0] + [1] * (len(ids) - 1), [0.0] + [-0.5] * (len(ids) - 1))
            for i, ids in enumerate(TOKENS)]
    sealed = [sealer.seal_row(TrajectoryRow.from_arrow(row)).to_arrow() for row in rows]
    uri = str(tmp_path / "table")
    commit_batch(uri, sealed, "batch-0", 0)
    return uri, store, sealed


def plan_of(uri: str, opener: RowOpener | None, lines: list[str]):
    config = TrainerConfig()
    config.gate.holdout_fraction = 0.0
    stream = RowStream(TableHistory(uri), StreamPosition(-1, 0, True))
    return build_step(stream, {}, "1", 0, config, say=lines.append, opener=opener)


def test_the_trainer_reads_the_exact_token_ids_of_sealed_rows(tmp_path):
    uri, store, _ = sealed_table(tmp_path)
    assert all(not row["token_ids"] for row in TableHistory(uri).rows_up_to())  # the table holds none in clear
    plan = plan_of(uri, RowOpener(store), [])
    assert sorted(list(t.token_ids) for t in plan.trajectories) == sorted(TOKENS)


def test_a_forgotten_subjects_row_is_skipped_and_counted(tmp_path):
    uri, store, sealed = sealed_table(tmp_path)
    store.forget("t1", [sealed[1]["subject_id"]])
    lines: list[str] = []
    plan = plan_of(uri, RowOpener(FileKeyStore(tmp_path / "keys")), lines)
    assert sorted(list(t.token_ids) for t in plan.trajectories) == sorted([TOKENS[0], TOKENS[2]])
    assert plan.skipped == {"forgotten": 1} and plan.consumed == 3
    assert any("t1" in line and "liverl forget" in line for line in lines), lines
    held = held_out_rows(TableHistory(uri).rows_up_to(), 1.0, 0, 64, RowOpener(store))  # the gate leaves it out
    assert sorted(t.trajectory_id for t, _ in held) == ["t0", "t2"]


def test_without_the_key_store_sealed_rows_are_skipped_as_invalid_not_trained_empty(tmp_path):
    uri, _, _ = sealed_table(tmp_path)
    lines: list[str] = []
    plan = plan_of(uri, None, lines)
    assert plan.empty and plan.skipped == {"invalid": 3}
    assert all("open the row first" in line for line in lines), lines
