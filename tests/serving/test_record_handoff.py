"""The recorder's hand-off: nothing lost or reordered, bounded, and one wake-up per batch rather than per item."""

from __future__ import annotations

import threading
import time

from serving.recording.handoff import BatchHandoff


def test_items_come_out_in_order_in_batches_no_larger_than_asked():
    handoff = BatchHandoff(capacity=100, linger_s=0.0)
    for i in range(25):
        assert handoff.put(i)
    assert not handoff.idle() and handoff.waiting() == 25
    first = handoff.take(max_items=10, timeout_s=1)
    assert first == list(range(10)) and not handoff.idle()  # a batch in hand is not idle
    handoff.done()
    rest = []
    for _ in range(2):
        rest += handoff.take(10, 1)
        handoff.done()
    assert rest == list(range(10, 25)) and handoff.idle()


def test_a_full_handoff_refuses_without_keeping_the_item():
    handoff = BatchHandoff(capacity=3, linger_s=0.0)
    assert [handoff.put(i) for i in range(5)] == [True, True, True, False, False]
    assert handoff.take(10, 1) == [0, 1, 2]


def test_take_waits_for_the_first_item_and_returns_empty_on_timeout():
    handoff = BatchHandoff(capacity=10, linger_s=0.0)
    started = time.monotonic()
    assert handoff.take(10, timeout_s=0.1) == [] and time.monotonic() - started >= 0.09
    threading.Timer(0.05, handoff.put, args=("late",)).start()
    assert handoff.take(10, timeout_s=5) == ["late"]


def test_the_woken_consumer_lingers_so_a_burst_becomes_one_batch():
    handoff = BatchHandoff(capacity=1000, linger_s=0.2)

    def burst():
        for i in range(50):
            handoff.put(i)
            time.sleep(0.001)

    producer = threading.Thread(target=burst)
    producer.start()
    batch = handoff.take(1000, timeout_s=5)
    producer.join()
    assert batch == list(range(50))


def test_concurrent_producers_lose_and_duplicate_nothing():
    handoff = BatchHandoff(capacity=1_000_000, linger_s=0.001)
    producers = [threading.Thread(target=lambda p=p: [handoff.put((p, i)) for i in range(5000)]) for p in range(4)]
    for producer in producers:
        producer.start()
    seen = []
    while any(p.is_alive() for p in producers) or not handoff.idle():
        seen += handoff.take(500, timeout_s=0.05)
        handoff.done()
    assert len(seen) == len(set(seen)) == 20000
    for p in range(4):  # each producer's items in the order it put them
        assert [i for q, i in seen if q == p] == list(range(5000))
