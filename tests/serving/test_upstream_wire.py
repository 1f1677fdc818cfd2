"""serving/engines/upstream/wire.py's completion stream over a real socket: an aiohttp server on 127.0.0.1 writes
vLLM's server-sent events in awkward pieces (a 300 KB first chunk, lines split across writes, CRLF endings), and
the client must read them as vLLM meant them, keep its connection for the next request and fail clearly."""

from __future__ import annotations

import asyncio

import aiohttp
import orjson
import pytest
from aiohttp import web

from serving.engines.upstream import wire

PROMPT = list(range(60_000))  # a first chunk of about 300 KB: vLLM sends every prompt id in it


def _event(choice: dict) -> bytes:
    return b"data: " + orjson.dumps({"choices": [choice]}) + b"\r\n\r\n"


async def _stream(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    if body["model"] == "refuse":
        return web.json_response({"error": "no such model"}, status=404)
    if body["model"] == "aborted" and not body["stream"]:  # what vLLM answers a request it aborted: 200, no tokens
        return web.json_response({"choices": [{"text": "", "token_ids": [], "finish_reason": "abort",
                                               "logprobs": {"token_logprobs": []}}]})
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    events = _event({"token_ids": [7], "logprobs": {"token_logprobs": [-0.5]}, "prompt_token_ids": PROMPT,
                     "finish_reason": None})
    events += _event({"token_ids": [8, 9], "logprobs": {"token_logprobs": [-0.25, -1.0]}, "finish_reason": "length"})
    if body["model"] == "mid-stream-error":
        events += b'data: {"error": {"message": "engine died"}}\n\n'
    if body["model"] == "aborted-early":  # streamed, aborted before its first token: vLLM sends only [DONE]
        events = b"data: [DONE]\r\n\r\n"
    if body["model"] == "aborted":  # paused with mode "abort" after its first token
        events = events.split(b"\r\n\r\n")[0] + b"\r\n\r\n" + _event({"token_ids": [], "finish_reason": "abort"})
    events += b"data: [DONE]\r\n\r\n"
    for start in range(0, len(events), 4093):  # writes that cut lines (and "data:" itself) anywhere
        await response.write(events[start:start + 4093])
        await asyncio.sleep(0)
    await response.write_eof()
    return response


def _with_server(check) -> None:
    """Run check(url) against the server, started and stopped on the same event loop."""
    async def run() -> None:
        app = web.Application()
        app.router.add_post("/v1/completions", _stream)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        try:
            await check(f"http://127.0.0.1:{runner.addresses[0][1]}")
        finally:
            await runner.cleanup()
    asyncio.run(run())


def _body(model: str) -> dict:
    return {"model": model, "prompt": PROMPT, "stream": True}


def test_a_stream_in_awkward_pieces_reads_as_sent_and_keeps_its_connection():
    async def check(url: str) -> None:
        connector = aiohttp.TCPConnector(limit=1)
        async with aiohttp.ClientSession(connector=connector) as session:
            for _ in range(2):  # the second request reuses the first one's connection: it was read to its end
                pieces = [piece async for piece in wire.complete(session, url, _body("m"))]
                assert [p.token_ids for p in pieces] == [[7], [8, 9]]
                assert [p.logprobs for p in pieces] == [[-0.5], [-0.25, -1.0]]
                assert pieces[0].prompt_token_ids == PROMPT and pieces[-1].finish_reason == "length"
                assert all(p.exact for p in pieces)
            assert sum(len(kept) for kept in connector._conns.values()) == 1
    _with_server(check)


def test_refusals_and_failures_are_errors_that_say_so():
    async def check(url: str) -> None:
        async with aiohttp.ClientSession() as session:
            with pytest.raises(wire.ServerRefused, match="answered 404: .*no such model") as refused:
                await anext(wire.complete(session, url, _body("refuse")))
            assert refused.value.status == 404
            with pytest.raises(RuntimeError, match="failed mid-stream: .*engine died"):
                [piece async for piece in wire.complete(session, url, _body("mid-stream-error"))]
            streamed = wire.complete(session, url, _body("aborted"))
            assert (await anext(streamed)).token_ids == [7]
            with pytest.raises(wire.ServerAborted, match="aborted the request"):
                await anext(streamed)  # never a reply cut short and passed off as finished
            with pytest.raises(wire.ServerAborted):
                await anext(wire.complete(session, url, _body("aborted") | {"stream": False}))
            with pytest.raises(wire.ServerAborted):
                await anext(wire.complete(session, url, _body("aborted-early")))
            closed = url.rsplit(":", 1)[0] + ":1"  # nothing listens on port 1
            with pytest.raises(wire.TRANSPORT_ERRORS):
                await anext(wire.complete(session, closed, _body("m")))
    _with_server(check)
