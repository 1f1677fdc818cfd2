"""The lineage codec: tags written by hand decode as expected, and encode/decode round-trips."""

from __future__ import annotations

import pytest

from liverl.contracts import names
from liverl.io.lineage import Lineage, decode, decode_offsets, encode, merge_offsets


def test_hand_written_tags_decode_into_a_typed_lineage():
    tags = {
        names.TAG_TABLE_VERSIONS: "[3, 1, 2]",
        names.TAG_KAFKA_OFFSETS: '{"events": {"0": [0, 24], "1": [5, 9]}, "calls": {"0": [7, 8]}}',
        names.TAG_REWARD_CONFIG_VERSION: "rewards-v2",
        names.TAG_PARENT_VERSION: "4",
        names.TAG_CODE_VERSION: "abc123",
        names.TAG_TRAJECTORIES: "37",
        names.TAG_TRAINER_STEP: "12",
        "liverl.trainer.checkpoint": "run/step12",  # other tags are ignored
    }
    assert decode(tags) == Lineage(
        table_versions=(1, 2, 3), kafka_offsets={"events": {"0": [0, 24], "1": [5, 9]}, "calls": {"0": [7, 8]}},
        reward_config_version="rewards-v2", parent_version="4", code_version="abc123", trajectories=37, step=12,
    )


def test_encode_then_decode_is_the_identity():
    lineage = Lineage(table_versions=(0, 5), kafka_offsets={"events": {"0": [0, 10]}}, reward_config_version="r1",
                      parent_version="2", code_version="deadbeef", trajectories=9, step=3)
    tags = encode(lineage)
    assert all(isinstance(value, str) for value in tags.values())
    assert tags[names.TAG_TABLE_VERSIONS] == "[0, 5]" and tags[names.TAG_TRAJECTORIES] == "9"
    assert decode(tags) == lineage
    base = Lineage(reward_config_version="r1", code_version="0.1.0")
    assert encode(base)[names.TAG_PARENT_VERSION] == "" and decode(encode(base)) == base


def test_a_version_without_lineage_tags_reads_as_a_base_policy():
    assert decode({}) == Lineage()
    assert decode({names.TAG_PARENT_VERSION: "", names.TAG_KAFKA_OFFSETS: "{}"}).parent_version is None


@pytest.mark.parametrize("key, value", [(names.TAG_TABLE_VERSIONS, "3"), (names.TAG_TABLE_VERSIONS, "[1, "),
                                        (names.TAG_TRAJECTORIES, "many"), (names.TAG_KAFKA_OFFSETS, '{"t": [1]}')])
def test_a_malformed_tag_names_itself(key, value):
    with pytest.raises(ValueError, match=key):
        decode({key: value})


def test_offsets_normalize_and_merge_into_one_range_per_partition():
    assert decode_offsets('{"t": {"0": [1, 2]}}') == {"t": {"0": [1, 2]}}
    assert decode_offsets("") == {} and decode_offsets(None) == {}
    merged = merge_offsets([{"t": {"0": [0, 5]}}, {"t": {0: (5, 9), "1": [0, 2]}}, {"u": {"0": [3, 4]}}])
    assert merged == {"t": {"0": [0, 9], "1": [0, 2]}, "u": {"0": [3, 4]}}
