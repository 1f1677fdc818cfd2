"""The registry client on a real MLflow server: alias semantics, versions, tags, files; and its failures.

The rule under test: None only when the model or alias does not exist; an unreachable or failing
server raises RegistryUnavailable naming the server (a tiny HTTP stub plays the failing server).
"""

from __future__ import annotations

import http.server
import json
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from liverl.contracts import names
from liverl.io.processes import free_port
from liverl.io.registry import ModelRegistry, RegistryUnavailable


@pytest.fixture
def registry(stack) -> ModelRegistry:
    return ModelRegistry(stack.mlflow.tracking_uri, f"registry-test-{uuid.uuid4().hex[:8]}")


@pytest.fixture
def no_retries(monkeypatch) -> None:
    """MLflow retries a failed request for minutes by default; one attempt is enough to see the failure."""
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")


def _policy_folder(folder: Path, weights: bytes) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text('{"model_type": "gpt2"}')
    (folder / "model.safetensors").write_bytes(weights)
    return folder


def test_a_model_or_alias_that_does_not_exist_reads_as_none(registry):
    assert registry.alias_version(names.ALIAS_CHAMPION) is None  # no model yet
    assert registry.aliases() == {} and registry.versions() == [] and registry.get("1") is None
    registry.ensure_model()
    registry.ensure_model()  # idempotent
    assert registry.alias_version(names.ALIAS_CHAMPION) is None  # model, but no such alias
    with pytest.raises(LookupError, match="has no version 7"):
        registry.tags("7")


def test_register_alias_tag_find_and_download_a_version(registry, tmp_path):
    folder = _policy_folder(tmp_path / "policy", b"weights-1")
    tags = {names.TAG_PARENT_VERSION: "", "test.key": "a"}
    first = registry.register_folder(folder, tags, "registry-tests", "first", step_metrics=[(1, {"loss": 0.5}),
                                                                                          (2, {"loss": 0.25})])
    second = registry.register_folder(_policy_folder(tmp_path / "other", b"weights-2"), {"test.key": "a"},
                                      "registry-tests", "second")
    assert (first, second) == ("1", "2")
    assert registry.alias_version(names.ALIAS_CANDIDATE) is None
    registry.set_alias(names.ALIAS_CANDIDATE, second)
    registry.set_alias(names.ALIAS_CHAMPION, first)
    assert registry.alias_version(names.ALIAS_CANDIDATE) == "2" and registry.alias_version(names.ALIAS_CHAMPION) == "1"
    assert registry.aliases() == {names.ALIAS_CANDIDATE: "2", names.ALIAS_CHAMPION: "1"}

    registry.set_tag(first, names.TAG_GATE_DECISION, "pass")
    assert registry.tags(first) == {**tags, names.TAG_GATE_DECISION: "pass"}
    assert registry.find_by_tag("test.key", "a") == "1"  # the oldest
    assert registry.find_by_tag("test.key", "b") is None
    assert [mv.version for mv in registry.versions()] == ["1", "2"]

    version = registry.get(first)
    run = registry.client.get_run(version.run_id)
    assert run.info.status == "FINISHED" and run.info.run_name == "first"
    assert [m.value for m in registry.client.get_metric_history(version.run_id, "loss")] == [0.5, 0.25]
    downloaded = registry.download(first, tmp_path / "download")
    assert downloaded.name == names.POLICY_ARTIFACT_PATH
    assert (downloaded / "model.safetensors").read_bytes() == b"weights-1"


def test_a_registry_that_is_down_raises_registry_unavailable_naming_it(no_retries):
    uri = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    registry = ModelRegistry(uri, "policy")
    for call in (lambda: registry.alias_version(names.ALIAS_CHAMPION), registry.versions,
                 lambda: registry.set_alias(names.ALIAS_CANDIDATE, "1")):
        with pytest.raises(RegistryUnavailable) as raised:
            call()
        assert uri in str(raised.value) and "Check that the server is up" in str(raised.value)


@contextmanager
def _answering(status: int, body: dict) -> Iterator[str]:
    """An HTTP server answering every request with `status` and the JSON `body`; yields its URI."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's naming)
            payload = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("status, error_code", [(500, "INTERNAL_ERROR"), (503, "TEMPORARILY_UNAVAILABLE"),
                                                (401, "UNAUTHENTICATED"), (403, "PERMISSION_DENIED")])
def test_server_errors_and_refusals_are_unavailable_not_missing(no_retries, status, error_code):
    with _answering(status, {"error_code": error_code, "message": "no"}) as uri:
        with pytest.raises(RegistryUnavailable, match=uri):
            ModelRegistry(uri, "policy").alias_version(names.ALIAS_CHAMPION)


def test_only_resource_does_not_exist_reads_as_missing(no_retries):
    with _answering(404, {"error_code": "RESOURCE_DOES_NOT_EXIST", "message": "no model"}) as uri:
        assert ModelRegistry(uri, "policy").alias_version(names.ALIAS_CHAMPION) is None
    with _answering(404, {"error": "not an MLflow server"}) as uri:  # a wrong URI is not "no alias"
        with pytest.raises(RegistryUnavailable):
            ModelRegistry(uri, "policy").alias_version(names.ALIAS_CHAMPION)
