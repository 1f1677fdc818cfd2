"""The README's capture examples (its "Capturing an agent product" section), run verbatim against a running serving (hf engine), a
running capture service and the real broker, then distilled: each example's session must be in the table."""

from __future__ import annotations

import re
import time
from pathlib import Path

from deltalake import DeltaTable

from pipelines.distill import distill_once
from tests.ingest.conftest import capture_config
from tests.pipelines.conftest import distiller_on
from tests.serving.conftest import ServerThread, serving_config

README = Path(__file__).resolve().parents[1] / "README.md"


def capture_section() -> str:
    """The README's "## Capturing an agent product" section, up to its first subsection or the next section."""
    text = README.read_text()
    start = text.index("## Capturing an agent product")
    return re.split(r"^##+ ", text[start + 3:], flags=re.M)[0]


def python_blocks(markdown: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", markdown, flags=re.S | re.M)


def test_the_capture_examples_produce_trajectories(fresh_topics, tiny_policy_dir, tmp_path, monkeypatch):
    from ingest.service import CaptureServer

    blocks = python_blocks(capture_section())
    assert len(blocks) == 3, "the README's capture section changed: check that this test still runs every example"
    config = serving_config(fresh_topics, tmp_path, "liverl-policy", policy_dir=tiny_policy_dir,
                            api_keys={"demo-key": {"tenant": "demo"}}, default_max_tokens=4)
    capture = CaptureServer(capture_config(fresh_topics, tmp_path / "capture", tenant_tokens={
        "demo": "demo-token"})).start()
    try:
        with ServerThread(config) as serving:
            monkeypatch.setenv("LIVERL_SERVING_URL", serving.http_base)
            monkeypatch.setenv("LIVERL_API_KEY", "demo-key")
            monkeypatch.setenv("LIVERL_CAPTURE_TARGET", capture.grpc_address)
            monkeypatch.setenv("LIVERL_CAPTURE_TOKEN", "demo-token")
            namespace: dict = {}
            for block in blocks:
                exec(compile(block, str(README), "exec"), namespace)  # noqa: S102 - the examples, verbatim
            assert serving.server.recorder.flush(30)
            stats = namespace["capture"].stats()
    finally:
        capture.stop()
    assert stats["sent"] == stats["recorded"] and stats["rejected"] == 0, stats

    tables = distiller_on(fresh_topics, tmp_path / "tables", "readme")
    report = distill_once(tables, now_ms=int(time.time() * 1000) + 60_000)
    assert report.committed and not report.dead_letters, report.line()
    rows = {r["session_id"]: r for r in DeltaTable(tables.table.trajectories_uri).to_pyarrow_table().to_pylist()}
    named = rows.pop(namespace["session"].session_id)  # the whole session: three calls, named three ways
    assert named["num_model_calls"] == 3 and named["task_family"] == "coding" and named["tenant_id"] == "demo"
    (zero_code,) = rows.values()  # the call sent with no liverl header, made trainable by its feedback
    assert zero_code["session_id"].startswith("chatcmpl-") and zero_code["num_model_calls"] == 1
    assert zero_code["tenant_id"] == "demo" and sum(zero_code["loss_mask"]) > 0
