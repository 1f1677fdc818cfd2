"""bench/report.record: one summary file that every benchmark merges into, with the environment it ran in."""

from __future__ import annotations

import json

from bench.report import SUMMARY_ENV, record


def test_figures_merge_under_their_name_with_the_environment(tmp_path, monkeypatch):
    summary = tmp_path / "summary.json"
    monkeypatch.setenv(SUMMARY_ENV, str(summary))
    record("one", {"ratio": 0.9})
    record("two", {"ratio": 1.1})
    data = json.loads(summary.read_text())
    assert data["one"]["ratio"] == 0.9 and data["two"]["ratio"] == 1.1
    assert data["one"]["environment"]["cores"] >= 1 and len(data["one"]["environment"]["load_average"]) == 3


def test_an_environment_read_before_the_work_is_kept(tmp_path):
    before = {"cores": 2, "load_average": [0.5, 0.4, 0.3], "at": "2026-12-02T04:11:00Z"}
    record("serving", {"ratio": 0.9}, path=tmp_path / "s.json", measured_in=before)
    assert json.loads((tmp_path / "s.json").read_text())["serving"]["environment"] == before


def test_no_summary_file_set_records_nothing(monkeypatch):
    monkeypatch.delenv(SUMMARY_ENV, raising=False)
    assert record("one", {"ratio": 0.9}) is None
