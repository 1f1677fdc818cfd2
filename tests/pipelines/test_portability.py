"""What remote workers can see: local state refused on remote runners, client files shipped in the graph."""

from __future__ import annotations

import os
import pickle

import pytest

from pipelines.portability import ShippedFile, check_shared_storage, is_remote, ship_client_files, unpack_client_files


@pytest.mark.parametrize("runner, options, remote", [
    ("DirectRunner", ["--direct_num_workers=2", "--direct_running_mode=multi_processing"], False),
    ("PortableRunner", ["--job_endpoint=localhost:8099", "--environment_type=EXTERNAL",
                        "--environment_config=localhost:50000"], False),
    ("PortableRunner", ["--job_endpoint=beam-jobs:8099"], True),
    ("FlinkRunner", [], False),  # [auto]: an embedded Flink on this machine
    ("FlinkRunner", ["--flink_master=flink-jobmanager:8081"], True),
    ("SparkRunner", ["--spark_master_url=spark://master:7077"], True),
    ("DataflowRunner", ["--project=p", "--region=r"], True),
])
def test_runners_whose_workers_are_other_machines_are_told_apart(runner, options, remote):
    assert is_remote(runner, options) is remote


def test_a_local_state_folder_is_refused_on_a_remote_runner_only(tmp_path):
    flink = ["--flink_master=flink-jobmanager:8081"]
    with pytest.raises(ValueError, match="pipelines.state_uri .* shared storage"):
        check_shared_storage("FlinkRunner", flink, str(tmp_path))
    with pytest.raises(ValueError, match="shared storage"):
        check_shared_storage("DataflowRunner", [], f"file://{tmp_path}")
    check_shared_storage("FlinkRunner", flink, "s3://bucket/distill-state")
    check_shared_storage("DirectRunner", [], str(tmp_path))


def test_client_files_travel_in_the_graph_and_come_back_as_private_files(tmp_path):
    ca = tmp_path / "kafka-ca.pem"
    ca.write_bytes(b"-----BEGIN CERTIFICATE-----\nabc\n-----END CERTIFICATE-----\n")
    shipped = ship_client_files({"bootstrap_servers": ["k:9093"], "ssl_cafile": str(ca)})
    assert shipped["ssl_cafile"] == ShippedFile(str(ca), ca.read_bytes())
    on_worker = pickle.loads(pickle.dumps(shipped))  # as the runner carries the DoFn to a worker
    ca.unlink()  # the worker's machine has no such file
    kwargs, written = unpack_client_files(on_worker, folder=str(tmp_path))
    assert kwargs["bootstrap_servers"] == ["k:9093"] and written == [kwargs["ssl_cafile"]]
    assert open(kwargs["ssl_cafile"], "rb").read() == shipped["ssl_cafile"].content
    assert os.stat(kwargs["ssl_cafile"]).st_mode & 0o077 == 0
    with pytest.raises(FileNotFoundError, match="must exist where `liverl distill` runs"):
        ship_client_files({"ssl_cafile": str(tmp_path / "missing.pem")})
