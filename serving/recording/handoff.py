"""A bounded hand-off from the request path to one consumer thread that wakes it once per batch.

queue.Queue wakes a waiting consumer on every put: a lock release that makes the kernel switch threads,
paid on the event loop's thread for every completion, and a consumer that then writes batches of one.
Here put() appends to a deque (atomic under the GIL) and sets an event only while the consumer sleeps;
the woken consumer lingers (linger_s) so that the completions of that time become one batch, one Kafka
write.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Generic, TypeVar

Item = TypeVar("Item")


class BatchHandoff(Generic[Item]):
    def __init__(self, capacity: int, linger_s: float):
        self._items: deque[Item] = deque()
        self._capacity = capacity
        self._linger_s = linger_s
        self._wake = threading.Event()
        self._taking = False  # the consumer holds a batch it has not finished (see idle())

    def put(self, item: Item) -> bool:
        """Hand item over; False (nothing kept) when capacity items are already waiting."""
        if len(self._items) >= self._capacity:
            return False
        self._items.append(item)
        if not self._wake.is_set():  # an attribute read: the event's lock only when the consumer may sleep
            self._wake.set()
        return True

    def take(self, max_items: int, timeout_s: float) -> list[Item]:
        """The next batch (up to max_items), waiting up to timeout_s for the first item; [] when none came.
        Call done() once the batch is handled."""
        if not self._items and not self._wake.wait(timeout_s):
            return []
        self._taking = True
        if len(self._items) < max_items:
            time.sleep(self._linger_s)  # let the burst gather: one batch instead of one per item
        self._wake.clear()  # before taking: an item put from now on wakes the next take()
        batch = []
        while self._items and len(batch) < max_items:
            batch.append(self._items.popleft())
        if not batch:
            self._taking = False
        return batch

    def done(self) -> None:
        self._taking = False

    def waiting(self) -> int:
        return len(self._items)

    def idle(self) -> bool:
        """Nothing waits and no batch is in hand."""
        return not self._items and not self._taking
