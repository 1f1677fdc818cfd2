"""SealTrajectories on the Beam runner: rows leave it sealed under their subject's key; a forgotten subject's row
is dropped and counted."""

from __future__ import annotations

import apache_beam as beam
from apache_beam.testing.test_pipeline import TestPipeline as BeamTestPipeline
from apache_beam.testing.util import assert_that, equal_to

from liverl.contracts.trajectory_row import TrajectoryRow
from liverl.privacy.keystore import FileKeyStore
from liverl.privacy.pseudonyms import Pseudonyms
from liverl.privacy.row_sealing import RowOpener
from pipelines.seal_rows import SealTrajectories


def _row(session_id: str, token_ids: list[int]) -> TrajectoryRow:
    n = len(token_ids)
    return TrajectoryRow(trajectory_id=f"t-{session_id}", session_id=session_id, tenant_id="acme",
                         agent_role="single", agent_id="main", batch_id="b1", event_date="2026-12-01",
                         token_ids=token_ids, loss_mask=[1] * n, behaviour_logprobs=[-0.5] * n)


def test_rows_are_sealed_and_a_forgotten_subjects_row_is_dropped(tmp_path):
    keys = tmp_path / "keys"
    store = FileKeyStore(keys)
    store.forget("acme", [Pseudonyms(store).session("acme", "gone")])
    opener = RowOpener(FileKeyStore(keys))

    def opened(row: TrajectoryRow) -> tuple[str, bool, list[int]]:
        return row.session_id, not row.token_ids, opener.open_row(row.to_arrow())["token_ids"]

    with BeamTestPipeline() as pipeline:
        rows = (pipeline
                | beam.Create([_row("kept", [7, 8, 9]), _row("gone", [1, 2])])
                | "SealTrajectories" >> beam.ParDo(SealTrajectories(str(keys))))
        assert_that(rows | beam.Map(opened), equal_to([("kept", True, [7, 8, 9])]))
    erased = pipeline.result.metrics().query(beam.metrics.MetricsFilter().with_name("erased_trajectories"))
    assert sum(c.committed for c in erased["counters"]) == 1
