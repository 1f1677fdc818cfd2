"""The trace search expressions: the integer regex a registry version's link is built from, checked exhaustively."""

from __future__ import annotations

import random
import re

from liverl.io.traces import (
    TAG_TRAINING_TRACES,
    integers_regex,
    table_versions_filter,
    trace_id_for,
    training_traces_tag,
)


def test_integers_regex_matches_exactly_the_given_versions():
    rng = random.Random(7)
    for trial in range(400):
        values = set(rng.sample(range(1200), rng.randint(1, 20)))
        if trial % 2:
            low = rng.randint(0, 1100)
            values |= set(range(low, low + rng.randint(1, 900)))  # long contiguous runs, as training windows are
        pattern = re.compile(f"^({integers_regex(values)})$")
        assert [n for n in range(2500) if pattern.match(str(n))] == sorted(values)


def test_a_contiguous_window_stays_short_and_the_tag_holds_it():
    assert table_versions_filter(range(3, 2001)) == (
        "tags.`liverl.table_version` RLIKE '^([3-9]|[1-9][0-9]|[1-9][0-9][0-9]|1[0-9][0-9][0-9]|2000)$'")
    assert training_traces_tag([]) == {TAG_TRAINING_TRACES: "tags.`liverl.table_version` = 'none'"}
    scattered = training_traces_tag(range(0, 40000, 2))[TAG_TRAINING_TRACES]  # too long exactly: the covering range
    assert scattered == table_versions_filter(range(0, 39999)) and len(scattered) < 250


def test_trace_ids_are_deterministic_per_experiment():
    assert trace_id_for("1", "t#a") == trace_id_for("1", "t#a") != trace_id_for("2", "t#a")
    assert re.fullmatch("tr-[0-9a-f]{32}", trace_id_for("1", "t#a"))
