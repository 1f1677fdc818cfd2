"""Load across a hot-swap: client threads calling one generate function until stopped, keeping every response and
every gRPC failure."""

from __future__ import annotations

import threading
from collections.abc import Callable

import grpc

from liverl.v1 import serving_pb2


class GenerateLoad:
    """`generate(worker, i)` is called by each worker for i = 0, 1, ... until the block ends."""

    def __init__(self, generate: Callable[[int, int], serving_pb2.GenerateResponse], workers: int = 3):
        self.generate = generate
        self.responses: list[serving_pb2.GenerateResponse] = []
        self.failures: list[grpc.RpcError] = []
        self._stop = threading.Event()
        self.workers = [threading.Thread(target=self._run, args=(w,)) for w in range(workers)]

    def _run(self, worker: int) -> None:
        i = 0
        while not self._stop.is_set():
            try:
                self.responses.append(self.generate(worker, i))
            except grpc.RpcError as error:
                self.failures.append(error)
            i += 1

    def __enter__(self) -> GenerateLoad:
        for worker in self.workers:
            worker.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        for worker in self.workers:
            worker.join()
