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


def test_unknown_key_is_an_error_naming_it(tmp_path):
    with pytest.raises(ValueError, match="no_such_field"):
        load_config(overrides=["--kafka.no_such_field", "1"], environ={})
    with pytest.raises(ValidationError, match="no_such_field"):
        load_config(environ={"LIVERL_KAFKA__NO_SUCH_FIELD": "1", "LIVERL_KAFKA__PARTITIONS": "2"})
    path = tmp_path / "c.toml"
    path.write_text("[kafka]\nno_such_field = 1\n")
    with pytest.raises(ValidationError, match="no_such_field"):
        load_config(path, environ={})


def test_override_without_value_says_how_to_write_it():
    with pytest.raises(ValueError, match="--kafka.partitions: expected one argument"):
        load_config(overrides=["--kafka.partitions"], environ={})


def test_every_shipped_config_parses():
    from pathlib import Path

    from demo.config import DemoLiverlConfig

    shipped = sorted(Path(__file__).resolve().parents[2].glob("configs/*.toml"))
    assert shipped
    for path in shipped:  # the demo files have a [demo] section: only `liverl demo` reads it
        load_config(path, environ={}, schema=DemoLiverlConfig if path.name.startswith("demo") else LiverlConfig)


def test_a_stage_config_refuses_the_demo_section():
    with pytest.raises(ValueError, match="demo"):
        load_config(overrides=["--demo.duration_s", "5"], environ={})


@pytest.mark.parametrize("flag, value, expected", [
    ("--kafka.partitions", "0", "greater than or equal to 1"),
    ("--kafka.replication_factor", "0", "greater than or equal to 1"),
    ("--kafka.topic_retention_ms", "1000", "or -1 to keep them forever"),
    ("--pipelines.follow_interval_s", "-1", "greater than or equal to 0"),
    ("--pipelines.idle_timeout_s", "0", "greater than 0"),
    ("--ingest.grpc_port", "70000", "less than or equal to 65535"),
    ("--ingest.rate_limit_burst_events", "0", "greater than or equal to 1"),
    ("--ingest.max_batch_events", "0", "greater than or equal to 1"),
    ("--ingest.redaction.max_field_chars", "0", "greater than or equal to 1"),
    ("--stack.s3_port", "60000", "less than or equal to"),
    ("--stack.start_timeout_s", "0", "greater than 0"),
    ("--serving.http_port", "70000", "less than or equal to 65535"),
    ("--serving.max_error_rate", "1.5", "less than or equal to 1"),
    ("--serving.probation_min_requests", "0", "greater than or equal to 1"),
    ("--serving.gpu_memory_utilization", "0", "greater than 0"),
    ("--serving.record_linger_s", "-1", "greater than or equal to 0"),
    ("--trainer.learning_rate", "0", "greater than 0"),
    ("--trainer.loss.clip_low", "1.5", "less than or equal to 1"),
    ("--trainer.loss.kimi_alpha", "0.5", "less than or equal to 0"),
    ("--trainer.staleness.downweight", "2", "less than or equal to 1"),
    ("--trainer.gate.max_reward_drop", "nan", "finite number"),
    ("--trainer.advantages.baseline_momentum", "-0.1", "greater than or equal to 0"),
    ("--rewards.penalties.per_broken_call", "-1", "greater than or equal to 0"),
    ("--rewards.penalties.turn_penalty_end", "10", "swap them"),
    ("--rewards.production.latency_limit_ms", "100", "must be above latency_target_ms"),
    ("--rewards.parl.parallel_target", "0", "greater than or equal to 1"),
    ("--rewards.judge.temperature", "3", "less than or equal to 2"),
])
def test_a_wrong_value_is_refused_naming_its_field(flag, value, expected):
    with pytest.raises(ValidationError) as refused:
        load_config(overrides=[flag, value], environ={})
    message = str(refused.value)
    assert flag[2:] in message and expected in message, message


def test_the_same_bounds_hold_from_a_file_and_the_environment(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text("[kafka]\npartitions = -3\n")
    with pytest.raises(ValidationError, match="kafka.partitions"):
        load_config(path, environ={})
    with pytest.raises(ValidationError, match="pipelines.follow_interval_s"):
        load_config(environ={"LIVERL_PIPELINES__FOLLOW_INTERVAL_S": "-0.5"})


BOUNDED_SECTIONS = ["kafka", "pipelines", "ingest", "stack", "mlflow", "table", "serving", "trainer", "rewards", "privacy"]


def test_every_number_in_these_sections_has_a_lower_bound():
    """A port, a size, a timeout or a rate below its floor is always a mistake: each says what it accepts. A number
    any real value suits (a signed threshold) must at least be finite: NaN would silently turn its check off."""
    from annotated_types import Ge, Gt
    from pydantic import BaseModel
    from pydantic.types import AllowInfNan

    def unbounded(model: type[BaseModel], where: str):
        for name, field in model.model_fields.items():
            kind = field.annotation
            if isinstance(kind, type) and issubclass(kind, BaseModel):
                yield from unbounded(kind, f"{where}.{name}")
            elif kind in (int, float, int | None, float | None) and \
                    not any(isinstance(m, (Ge, Gt)) or m == AllowInfNan(False) for m in field.metadata):
                yield f"{where}.{name}"

    missing = [f for section in BOUNDED_SECTIONS
               for f in unbounded(LiverlConfig.model_fields[section].annotation, section)]
    assert not missing, f"numeric fields without a bound (Field(ge=..., le=...)): {missing}"


def test_every_field_in_these_sections_says_what_it_is():
    from pydantic import BaseModel

    def undocumented(model: type[BaseModel], where: str):
        for name, field in model.model_fields.items():
            if not field.description:
                yield f"{where}.{name}"
            if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
                yield from undocumented(field.annotation, f"{where}.{name}")

    missing = [f for section in BOUNDED_SECTIONS
               for f in undocumented(LiverlConfig.model_fields[section].annotation, section)]
    assert not missing, f"fields without a docstring under them: {missing}"


def test_numbers_reach_literal_fields_from_the_command_line_and_the_environment():
    assert load_config(overrides=["--trainer.deepspeed.zero_stage", "3"], environ={}).trainer.deepspeed.zero_stage == 3
    config = load_config(environ={"LIVERL_TRAINER__DEEPSPEED__ZERO_STAGE": "2"})
    assert config.trainer.deepspeed.zero_stage == 2
