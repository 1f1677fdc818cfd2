"""SealTrajectories: each TrajectoryRow with its token ids sealed under its data subject's key.

The ids are the user's text; sealed on the workers, before the rows are staged, so no file the pipelines write
(staged batches, the Delta table and its history) holds them in clear (liverl/privacy/row_sealing.py). A row
whose subject `liverl forget` erased meanwhile is dropped and counted: it may never be stored again.
"""

from __future__ import annotations

import apache_beam as beam

from liverl.privacy.keystore import SubjectForgotten


class SealTrajectories(beam.DoFn):
    def __init__(self, keys_dir: str):
        self._keys_dir = keys_dir  # the key store is made on the worker: keys never travel with the pipeline
        self._sealer = None
        self.erased = beam.metrics.Metrics.counter("distill", "erased_trajectories")

    def setup(self):
        from pathlib import Path

        from liverl.privacy.keystore import FileKeyStore
        from liverl.privacy.row_sealing import RowSealer

        self._sealer = RowSealer(FileKeyStore(Path(self._keys_dir)))

    def process(self, row):
        try:
            yield self._sealer.seal_row(row)
        except SubjectForgotten:
            self.erased.inc()
