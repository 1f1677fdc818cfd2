"""Config layering: defaults < file < environment < command line, and clear errors."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from liverl.config import LiverlConfig, load_config


def test_precedence_file_then_env_then_cli(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('[kafka]\npartitions = 3\nsession_events_topic = "from-file"\n[trainer]\nlearning_rate = 0.5\n')
    config = load_config(
        path,
        overrides=["--trainer.learning_rate", "0.25"],
        environ={"LIVERL_KAFKA__PARTITIONS": "7", "LIVERL_TRAINER__LEARNING_RATE": "0.1"},
    )
    assert config.kafka.session_events_topic == "from-file"
    assert config.kafka.partitions == 7
    assert config.trainer.learning_rate == 0.25


def test_unset_addresses_and_folders_follow_the_embedded_stack(tmp_path):
    config = load_config(overrides=[f"--stack.data_dir={tmp_path}", "--stack.broker_port", "1234"], environ={})
    assert config.kafka.bootstrap_servers == "127.0.0.1:1234"
    assert config.table.trajectories_uri == str(tmp_path / "tables" / "trajectories")
    real = load_config(overrides=["--kafka.bootstrap_servers", "kafka-0:9092,kafka-1:9092"], environ={})
    assert real.kafka.client_kwargs()["bootstrap_servers"] == ["kafka-0:9092", "kafka-1:9092"]


def test_unknown_key_is_an_error_naming_it():
    with pytest.raises(ValidationError, match="no_such_field"):
        load_config(overrides=["--kafka.no_such_field", "1"], environ={})


def test_override_without_value_says_how_to_write_it():
    with pytest.raises(ValueError, match="has no value"):
        load_config(overrides=["--kafka.partitions"], environ={})


def test_every_shipped_config_parses():
    from pathlib import Path

    from demo.config import DemoLiverlConfig

    shipped = sorted(Path(__file__).resolve().parents[2].glob("configs/*.toml"))
    assert shipped
    for path in shipped:  # the demo's file has a [demo] section: only `liverl demo` reads it
        load_config(path, environ={}, schema=DemoLiverlConfig if path.name == "demo.toml" else LiverlConfig)


def test_a_stage_config_refuses_the_demo_section():
    with pytest.raises(ValueError, match="demo"):
        load_config(overrides=["--demo.duration_s", "5"], environ={})
