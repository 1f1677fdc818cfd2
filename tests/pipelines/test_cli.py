"""`liverl distill` and `liverl distill --follow` through the real CLI entry point."""

from __future__ import annotations

from liverl.cli import main
from tests.pipelines.producing import coding_session, produce


def _overrides(config) -> list[str]:
    return ["--kafka.bootstrap_servers", config.kafka.bootstrap_servers,
            "--kafka.session_events_topic", config.kafka.session_events_topic,
            "--kafka.model_calls_topic", config.kafka.model_calls_topic,
            "--table.trajectories_uri", config.table.trajectories_uri,
            "--table.dead_letters_uri", config.table.dead_letters_uri,
            "--pipelines.reward_horizon_s", "0", "--pipelines.audit", "false",
            "--pipelines.follow_interval_s", "0"]


def test_distill_prints_one_line_per_batch(distill_config, capsys):
    produce(distill_config, *coding_session("cli1"))
    assert main(["distill", *_overrides(distill_config)]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith("batch liverl-distill-00000001 | sessions 1 ") and "trajectories 1" in line
    assert "table v0" in line

    produce(distill_config, *coding_session("cli2"))
    assert main(["distill", "--follow", "--max-batches", "2", *_overrides(distill_config)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and "table v1" in lines[0] and "nothing new" in lines[1]


def test_distill_reports_a_missing_topic_cleanly(distill_config, capsys):
    args = _overrides(distill_config)
    args[args.index("--kafka.model_calls_topic") + 1] = "no-such-topic"
    assert main(["distill", *args]) == 1
    assert "does not exist" in capsys.readouterr().err
