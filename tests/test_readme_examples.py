"""The README's capture examples (its "Capturing an agent product" section, in docs/capture.md), run verbatim against a running serving (hf engine), a
running capture service and the real broker, then distilled: each example's session must be in the table."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest
from deltalake import DeltaTable

from pipelines.distill import distill_once
from tests.ingest.conftest import capture_config
from tests.pipelines.conftest import distiller_on
from tests.serving.conftest import ServerThread, serving_config

README = Path(__file__).resolve().parents[1] / "README.md"


CAPTURE_DOC = README.parent / "docs" / "capture.md"  # the README links its capture section there


def capture_section() -> str:
    """docs/capture.md's opening part (the README's "Capturing an agent product"), up to its first subsection."""
    text = CAPTURE_DOC.read_text()
    start = text.index("# Capturing an agent product")
    return re.split(r"^##+ ", text[start + 2:], flags=re.M)[0]


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


# The README's CLI list, run as written: each line's placeholders get a sample value, "a | b" and "x|y" give one
# line per alternative, and "[...]" parts are tried both left out and written out.
PLACEHOLDERS = {"M": "1", "N": "3", "F": "openai-chat", "T": "demo", "S": "s-1", "DIR": "some/policy", "PATH...": "a.jsonl",
                "U": "dave@example.com"}


def cli_section() -> str:
    """The command lines of the README's "## The CLI" code block (continuation lines describe, they are skipped)."""
    text = README.read_text().split("## The CLI", 1)[1]
    block = re.search(r"^```\n(.*?)^```", text, flags=re.S | re.M).group(1)
    return [re.split(r"\s{2,}", line, maxsplit=1)[0] for line in block.splitlines() if line.startswith("liverl ")]


def expand(line: str) -> list[list[str]]:
    """Every argv a README command line stands for (without the leading "liverl")."""
    lines = [line]
    if " | " in line:  # "liverl up | down | status": three commands
        head, *rest = line.split(" | ")
        lines = [head] + [f"liverl {command}" for command in rest]
    expanded = []
    for text in lines:
        for optional in (False, True):
            words = re.sub(r"\[([^\]]*)\]", (lambda m: m.group(1)) if optional else "", text).split()[1:]
            choices = [[PLACEHOLDERS.get(word, word)] if "|" not in word else word.split("|") for word in words]
            argvs = [[]]
            for options in choices:
                argvs = [argv + [option] for argv in argvs for option in options]
            expanded += [argv for argv in argvs if argv not in expanded]
    return expanded


def readme_commands() -> list[list[str]]:
    return [argv for line in cli_section() for argv in expand(line)]


def test_the_cli_list_is_read_whole():
    commands = {argv[0] for argv in readme_commands()}
    assert {"up", "down", "status", "capture", "serve", "distill", "train", "import", "retention", "topics",
            "demo", "forget", "tenants"} <= commands, commands
    assert ["topics", "dead-letters", "--tenant", "demo", "--session", "s-1", "--tail", "3", "--follow"] in \
        readme_commands()


@pytest.mark.parametrize("argv", readme_commands(), ids=" ".join)
def test_every_readme_cli_line_parses_and_loads_its_config(argv, monkeypatch):
    """As `liverl` would: split '@ file' and overrides, parse the command's flags, load its config (the fast no-op
    path of every command: run() is what starts services)."""
    from liverl import cli

    monkeypatch.chdir(README.parent)  # the README's paths (configs/...) are relative to the checkout
    for name in [key for key in os.environ if key.startswith("LIVERL_")]:
        monkeypatch.delenv(name)
    own, config_file, overrides = cli.split_argv(argv)
    try:
        args = cli.build_parser().parse_args(own)
    except SystemExit as error:
        raise AssertionError(f"the README's `liverl {' '.join(argv)}` does not parse (exit {error.code})") from error
    config = cli.command_config(args, config_file, overrides)
    assert config.pipelines.reward_horizon_s >= 0
    with pytest.raises(SystemExit) as shown:
        cli.main([argv[0], "--help"])
    assert shown.value.code == 0


def test_liverl_demo_without_a_file_runs_the_demos_own_settings():
    """`liverl demo` as the README lists it: configs/demo.toml, whose horizon lets sessions close within the run."""
    from demo.config import DemoLiverlConfig
    from liverl import cli
    from liverl.config import load_config
    from pipelines.pending import impossible_within

    configs = README.parent / "configs"
    config = cli.command_config(cli.build_parser().parse_args(["demo", "--minutes", "10"]), None, [])
    assert config == load_config(configs / "demo.toml", environ={}, schema=DemoLiverlConfig)
    assert config.pipelines.reward_horizon_s == 5.0 and impossible_within(600, config.pipelines) is None
    tenants = cli.command_config(cli.build_parser().parse_args(["demo", "--tenants", "3"]), None, [])
    assert tenants == load_config(configs / "demo-tenants.toml", environ={}, schema=DemoLiverlConfig)


def test_the_readme_is_a_manual_that_links_what_it_does_not_hold():
    """At most 1,500 words (the rest lives in docs/), and every docs/ page it links exists."""
    text = README.read_text()
    assert len(text.split()) <= 1500, len(text.split())
    linked = re.findall(r"\]\((docs/[^)#]+)", text)
    assert linked and all((README.parent / page).is_file() for page in linked), linked
