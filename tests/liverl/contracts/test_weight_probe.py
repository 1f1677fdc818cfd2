"""The weight probe file: what the trainer writes is what serving reads, and anything else is refused by name."""

import json

import pytest

from liverl.contracts.weight_probe import PROBE_FILE, WeightProbe, has_probe, read_probe


def test_a_written_probe_reads_back_whole(tmp_path):
    probe = WeightProbe(sequences=((5, 9, 2), (1, 1)), logprobs=((-0.5, -3.25), (-1e-7,)), dtype="bfloat16")
    assert not has_probe(tmp_path)
    probe.write(tmp_path)
    assert has_probe(tmp_path) and read_probe(tmp_path) == probe
    assert [p.name for p in tmp_path.iterdir()] == [PROBE_FILE]  # the staging file is gone


@pytest.mark.parametrize("body", [
    {"format": 2, "dtype": "float32", "sequences": [[1, 2]], "logprobs": [[-1.0]]},  # a newer format
    {"format": 1, "dtype": "float32", "sequences": [[1, 2]], "logprobs": [[0.5]]},  # not a log-probability
    {"format": 1, "dtype": "float32", "sequences": [[1, 2, 3]], "logprobs": [[-1.0]]},  # a row short
    {"format": 1, "dtype": "float32", "sequences": [[1, 2]]},  # a key missing
    {"format": 1, "dtype": "float32", "sequences": [], "logprobs": []},  # nothing to check
])
def test_probe_files_that_do_not_fit_are_refused(tmp_path, body):
    (tmp_path / PROBE_FILE).write_text(json.dumps(body))
    with pytest.raises(ValueError, match="re-export"):
        read_probe(tmp_path)


def test_a_truncated_probe_is_refused(tmp_path):
    WeightProbe(sequences=((5, 9, 2),), logprobs=((-0.5, -3.25),), dtype="float32").write(tmp_path)
    text = (tmp_path / PROBE_FILE).read_text()
    (tmp_path / PROBE_FILE).write_text(text[: len(text) // 2])
    with pytest.raises(ValueError, match=PROBE_FILE):
        read_probe(tmp_path)
