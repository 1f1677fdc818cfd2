"""Build a LiverlConfig from defaults < TOML file < environment < command line, for every stage.

    liverl train @ my.toml --trainer.learning_rate 1e-5
    LIVERL_KAFKA__BOOTSTRAP_SERVERS=broker:9092 liverl distill
"""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Mapping, Sequence
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
    """Merge the layers and validate once, so an error names the offending key whatever layer set it.

    `schema` is the tree to validate against: a command with sections of its own (the demo) passes a subclass.
    """
    layers = [
        _read_toml(config_file) if config_file else {},
        _from_environment(os.environ if environ is None else environ),
        _from_overrides(overrides),
    ]
    merged: dict = {}
    for layer in layers:
        _deep_merge(merged, layer)
    return schema.model_validate(merged)


def _read_toml(path: str | Path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"config file {path} does not exist; pass an existing TOML file after '@'")
    with path.open("rb") as handle:
        return tomllib.load(handle)


def _from_environment(environ: Mapping[str, str]) -> dict:
    """LIVERL_SECTION__FIELD=value -> {"section": {"field": value}}; JSON values are decoded."""
    tree: dict = {}
    for key, raw in environ.items():
        if key.startswith(ENV_PREFIX) and ENV_NESTING in key:
            path = key[len(ENV_PREFIX):].lower().split(ENV_NESTING)
            _set_path(tree, path, _decode(raw))
    return tree


def _from_overrides(overrides: Sequence[str]) -> dict:
    """["--a.b", "1", "--c.d=2"] -> {"a": {"b": 1}, "c": {"d": 2}}."""
    tree: dict = {}
    items = list(overrides)
    while items:
        flag = items.pop(0)
        if not flag.startswith("--") or "." not in flag:
            raise ValueError(f"unexpected argument {flag!r}: overrides look like --section.field VALUE")
        if "=" in flag:
            flag, raw = flag.split("=", 1)
        elif items:
            raw = items.pop(0)
        else:
            raise ValueError(f"override {flag} has no value: write {flag} VALUE")
        _set_path(tree, flag[2:].replace("-", "_").split("."), _decode(raw))
    return tree


def _decode(raw: str):
    """Numbers, booleans, lists and objects may be written as JSON; anything else stays a string."""
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw


def _set_path(tree: dict, path: list[str], value) -> None:
    for part in path[:-1]:
        tree = tree.setdefault(part, {})
    tree[path[-1]] = value


def _deep_merge(into: dict, layer: Mapping) -> None:
    for key, value in layer.items():
        if isinstance(value, Mapping) and isinstance(into.get(key), dict):
            _deep_merge(into[key], value)
        else:
            into[key] = value
