"""The upstream fleet's connections to its servers: a kept-alive connection the server closes is not a server down,
and a connection is never kept idle past serving.upstream.idle_connection_s.

A benchmark in front of one `vllm serve` lost 96 requests in two rounds: the fleet's reconcile /health, every 5 s
on a connection idle for 5 s, failed with a read error (likely: vLLM's server closes a connection idle for 5 s, its
keep-alive), the fleet took the only server out of rotation, and every request found none. The servers here are a
few lines of asyncio on 127.0.0.1 that answer as vLLM's does and close connections on cue.
"""

from __future__ import annotations

import asyncio

import pytest

from liverl.config.serving import ServingConfig
from serving.engines.upstream.fleet import UpstreamFleet, UpstreamUnavailable

MODELS = b'{"object": "list", "data": [{"id": "base", "object": "model", "parent": null}]}'


class Server:
    """HTTP/1.1 on 127.0.0.1 that answers /health and /v1/models, keeping connections alive. answered_per_connection:
    after that many answers on one connection, the next request on it is read and the connection closed unanswered
    (the server's keep-alive ran out as the request arrived); None: never."""

    def __init__(self, answered_per_connection: int | None):
        self.answered_per_connection = answered_per_connection
        self.connections = self.dropped = 0
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> str:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def __aexit__(self, *_) -> None:
        self._server.close()
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        answered = 0
        try:
            while head := await reader.readuntil(b"\r\n\r\n"):
                if self.answered_per_connection is not None and answered >= self.answered_per_connection:
                    self.dropped += 1
                    return
                body = MODELS if head.split(b" ")[1] == b"/v1/models" else b""
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                             + str(len(body)).encode() + b"\r\n\r\n" + body)
                await writer.drain()
                answered += 1
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the client closed it
        finally:
            writer.close()


def _fleet(url: str, idle_connection_s: float = 2.0) -> UpstreamFleet:
    config = ServingConfig.model_validate({"upstream": {"idle_connection_s": idle_connection_s}})
    return UpstreamFleet([url], None, timeout_s=5.0, reconcile_interval_s=3600.0, serving_config=config,
                         say=lambda line: None)


def test_a_kept_alive_connection_closed_under_a_read_is_tried_again_not_taken_out():
    async def run() -> None:
        async with Server(answered_per_connection=1) as url:
            fleet = _fleet(url)
            await fleet.start()  # /health answered, /v1/models dropped on the same connection, then answered
            try:
                for _ in range(3):
                    await fleet.reconcile()
                    assert fleet.pick(None) == url and fleet.servers_up() == 1
            finally:
                await fleet.close()
            server = fleet.servers[0]
            assert server.healthy, server.reason

    asyncio.run(run())


def test_the_retry_never_hides_a_server_that_answers_nothing():
    async def run() -> Server:
        server = Server(answered_per_connection=0)
        async with server as url:
            with pytest.raises(UpstreamUnavailable, match="is not usable"):
                await _fleet(url).start()
        return server

    server = asyncio.run(run())
    assert server.dropped == 2, "one read, tried once more on a new connection, and no more"


@pytest.mark.parametrize(("idle_connection_s", "connections"), [(0.2, 2), (30.0, 1)])
def test_a_connection_idle_past_its_limit_is_not_reused(idle_connection_s, connections):
    async def run() -> Server:
        server = Server(answered_per_connection=None)
        async with server as url:
            fleet = _fleet(url, idle_connection_s)
            await fleet.start()
            await asyncio.sleep(0.6)
            await fleet.reconcile()
            await fleet.close()
        return server

    assert asyncio.run(run()).connections == connections
