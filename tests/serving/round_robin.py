"""Plain round robin over upstream servers, for the base model only: a router the upstream engine's tests hand it
instead of the fleet (serving/engines/upstream/fleet.py), to choose which server a request tries first (a dead one,
to see it routed around). It skips a server that failed a request for `retry_down_s`, and pushes no adapters."""

from __future__ import annotations

import itertools
import time

from serving.engines.engine import Adapter


class RoundRobinUrls:
    """The fleet's routing surface (pick, report_failure, servers_up) without its adapter management."""

    def __init__(self, urls: list[str], retry_down_s: float = 5.0):
        if not urls:
            raise ValueError("RoundRobinUrls needs at least one server URL (e.g. http://vllm-0:8000)")
        self.urls = list(urls)
        self._retry_down_s = retry_down_s
        self._down_until = dict.fromkeys(self.urls, 0.0)  # monotonic time before which a failed server is skipped
        self._turn = itertools.count()

    async def start(self) -> None:
        """Nothing to prepare (the engine checks every server itself)."""

    def pick(self, adapter_name: str | None) -> str:
        """The next server in turn that is not skipped; when all are, the one skipped longest ago (a request tries
        it rather than failing unasked)."""
        if adapter_name is not None:
            raise RuntimeError(f"adapter {adapter_name}: adapter versions on upstream servers need the fleet "
                               "(serving/engines/upstream/fleet.py), which loads them into every server")
        now = time.monotonic()
        up = [url for url in self.urls if self._down_until[url] <= now]
        if not up:
            return min(self.urls, key=self._down_until.__getitem__)
        return up[next(self._turn) % len(up)]

    def report_failure(self, url: str, reason: str) -> None:
        self._down_until[url] = time.monotonic() + self._retry_down_s

    def report_success(self, url: str) -> None:
        self._down_until[url] = 0.0

    def servers_up(self) -> int:
        now = time.monotonic()
        return sum(until <= now for until in self._down_until.values())

    def has(self, adapter: Adapter) -> bool:
        return False

    async def push(self, adapter: Adapter) -> dict:
        self.pick(adapter.name)  # raises: no adapters without the fleet
        return {}

    async def unload(self, adapter: Adapter) -> None:
        """Nothing was loaded."""

    async def close(self) -> None:
        """Nothing held."""
