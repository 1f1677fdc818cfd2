"""Build a LiverlConfig from defaults < TOML file < environment < command line, for every stage.

    liverl train @ my.toml --trainer.learning_rate 1e-5
    LIVERL_KAFKA__BOOTSTRAP_SERVERS=broker:9092 liverl distill

Each layer is read by pydantic-settings' own source (TOML, environment, CLI); the layers are merged here and the
tree is validated once, as the schema itself, so an error names the offending key whatever layer set it and the
result is a plain config object (picklable, no settings machinery left in it).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path

from liverl.config.root import LiverlConfig

ENV_PREFIX = "LIVERL_"
ENV_NESTING = "__"


def load_config(
    config_file: str | Path | None = None,
    overrides: Sequence[str] = (),
    environ: Mapping[str, str] | None = None,
    schema: type[LiverlConfig] = LiverlConfig,
) -> LiverlConfig:
    """Merge the layers and validate once.

    `schema` is the tree to validate against: a command with sections of its own (the demo) passes a subclass.
    `environ` replaces the process environment (tests, and tools that must not read it).
    Raises FileNotFoundError for a missing file, ValueError (pydantic-settings' SettingsError) for a flag that
    names no setting or lacks its value, and pydantic's ValidationError for a wrong value.
    """
    from pydantic_settings import CliSettingsSource, EnvSettingsSource, TomlConfigSettingsSource

    settings = _settings_class(schema)
    if config_file and not Path(config_file).is_file():
        raise FileNotFoundError(f"config file {config_file} does not exist; pass an existing TOML file after '@'")
    env = EnvSettingsSource(settings, env_prefix=ENV_PREFIX, env_nested_delimiter=ENV_NESTING, case_sensitive=False)
    if environ is not None:
        env.env_vars = {key.lower(): value for key, value in environ.items()}  # the source reads these, not os
    layers = [
        TomlConfigSettingsSource(settings, toml_file=Path(config_file))() if config_file else {},
        env(),
        CliSettingsSource(settings, cli_parse_args=list(overrides), cli_implicit_flags=False,
                          cli_exit_on_error=False)() if overrides else {},
    ]
    merged: dict = {}
    for layer in layers:
        _deep_merge(merged, _decoded(layer))
    return schema.model_validate(merged)


@cache
def _settings_class(schema: type[LiverlConfig]):
    """The schema as a pydantic-settings class: only the sources read it (to learn the fields' names and types)."""
    from pydantic_settings import BaseSettings, SettingsConfigDict

    class Layered(schema, BaseSettings):
        model_config = SettingsConfigDict(extra="forbid")

    return Layered


def _decoded(tree):
    """Text leaves written as JSON (numbers, booleans, lists, objects) become those values, as the sources leave
    scalars as text: `--trainer.deepspeed.zero_stage 3` must meet an int literal, not "3"."""
    if isinstance(tree, Mapping):
        return {key: _decoded(value) for key, value in tree.items()}
    if isinstance(tree, list):
        return [_decoded(value) for value in tree]
    if isinstance(tree, str):
        try:
            return json.loads(tree)
        except json.JSONDecodeError:
            return tree
    return tree


def _deep_merge(into: dict, layer: Mapping) -> None:
    for key, value in layer.items():
        if isinstance(value, Mapping) and isinstance(into.get(key), dict):
            _deep_merge(into[key], value)
        else:
            into[key] = dict(value) if isinstance(value, Mapping) else value

