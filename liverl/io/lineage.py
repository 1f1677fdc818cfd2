"""The lineage codec: what a registered version was trained on, as registry tags and back.

The trainer encodes a `Lineage` into the tags of each version it registers; anyone auditing the
registry (the demo, a person, a later trainer) decodes them with the same code. Tag names are the
contract (liverl.contracts.names); values are strings, JSON where structured.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from liverl.contracts import names

KafkaOffsets = dict[str, dict[str, list[int]]]
"""{topic: {partition: [first, end_exclusive]}}: the Kafka records a batch or a version covers."""


@dataclass(frozen=True)
class Lineage:
    """What one version was trained on, from what, by which code. Defaults: a base policy's lineage."""

    table_versions: tuple[int, ...] = ()  # trajectory-table versions trained on (sorted)
    kafka_offsets: KafkaOffsets = field(default_factory=dict)
    reward_config_version: str = ""
    parent_version: str | None = None  # the version training started from; None for a base policy
    code_version: str = ""  # git commit of the trainer, or the package version
    trajectories: int = 0
    step: int = 0  # the trainer step it was exported at


def encode(lineage: Lineage) -> dict[str, str]:
    """The version tags of `lineage`."""
    return {
        names.TAG_TABLE_VERSIONS: json.dumps(sorted(lineage.table_versions)),
        names.TAG_KAFKA_OFFSETS: encode_offsets(lineage.kafka_offsets),
        names.TAG_REWARD_CONFIG_VERSION: lineage.reward_config_version,
        names.TAG_PARENT_VERSION: lineage.parent_version or "",
        names.TAG_CODE_VERSION: lineage.code_version,
        names.TAG_TRAJECTORIES: str(lineage.trajectories),
        names.TAG_TRAINER_STEP: str(lineage.step),
    }


def decode(tags: Mapping[str, str]) -> Lineage:
    """The lineage in a version's tags; missing tags read as a base policy's (older or hand-made versions)."""
    return Lineage(
        table_versions=_table_versions(tags.get(names.TAG_TABLE_VERSIONS, "")),
        kafka_offsets=decode_offsets(tags.get(names.TAG_KAFKA_OFFSETS, ""), names.TAG_KAFKA_OFFSETS),
        reward_config_version=tags.get(names.TAG_REWARD_CONFIG_VERSION, ""),
        parent_version=tags.get(names.TAG_PARENT_VERSION) or None,
        code_version=tags.get(names.TAG_CODE_VERSION, ""),
        trajectories=_int(tags.get(names.TAG_TRAJECTORIES) or 0, names.TAG_TRAJECTORIES),
        step=_int(tags.get(names.TAG_TRAINER_STEP) or 0, names.TAG_TRAINER_STEP),
    )


def encode_offsets(offsets: Mapping[str, Mapping]) -> str:
    return json.dumps(normalize_offsets(offsets), sort_keys=True)


def decode_offsets(text: str | None, where: str = "kafka offsets") -> KafkaOffsets:
    """Offsets from their JSON (a version tag or a table commit's metadata); "" or None: none."""
    if not text:
        return {}
    try:
        return normalize_offsets(json.loads(text))
    except (ValueError, TypeError, AttributeError) as error:
        raise ValueError(f"{where} is not {{topic: {{partition: [first, end]}}}} JSON: {text[:200]!r} "
                         f"({error})") from error


def normalize_offsets(offsets: Mapping[str, Mapping]) -> KafkaOffsets:
    """String partitions and [int, int] ranges, whatever JSON or tuples they came as."""
    return {str(topic): {str(partition): [int(first), int(end)] for partition, (first, end) in parts.items()}
            for topic, parts in offsets.items()}


def merge_offsets(ranges: Iterable[Mapping[str, Mapping]]) -> KafkaOffsets:
    """Union of offset maps into one covering range per partition."""
    merged: KafkaOffsets = {}
    for offsets in ranges:
        for topic, partitions in normalize_offsets(offsets).items():
            for partition, (first, end) in partitions.items():
                current = merged.setdefault(topic, {}).get(partition)
                merged[topic][partition] = [first, end] if current is None else [min(current[0], first),
                                                                                  max(current[1], end)]
    return merged


def _table_versions(text: str) -> tuple[int, ...]:
    try:
        versions = json.loads(text) if text else []
    except ValueError:
        versions = None
    if not isinstance(versions, list):
        raise ValueError(f"lineage tag {names.TAG_TABLE_VERSIONS} is not a JSON list of table versions: {text[:200]!r}")
    return tuple(sorted(_int(version, names.TAG_TABLE_VERSIONS) for version in versions))


def _int(value, key: str) -> int:
    try:
        return int(value)
    except (TypeError, ValueError) as error:
        raise ValueError(f"lineage tag {key} holds {value!r} where a whole number belongs") from error
