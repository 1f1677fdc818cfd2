"""A stand-in OpenAI-compatible judge endpoint on 127.0.0.1, for tests and the rewards benchmark.

The judge's model is outside what liverl integrates (any OpenAI-compatible endpoint serves it), so a
real HTTP server answering in that API's shape is a fair double of a remote LLM judge: the client code,
the HTTP stack, timeouts and failures are all exercised for real. Never used on a production path.

    with JudgeDouble(lambda request: Reply(content="7")) as server:
        config.judge.base_url = server.base_url
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass(frozen=True)
class Reply:
    content: str = "5"
    status: int = 200
    delay_s: float = 0.0


@dataclass(frozen=True)
class SeenRequest:
    path: str
    headers: dict[str, str]
    body: dict


class JudgeDouble:
    """Answers POST /v1/chat/completions with `answer(request_body)`; records every request it saw."""

    def __init__(self, answer: Callable[[dict], Reply], port: int = 0):
        self.answer = answer
        self.requests: list[SeenRequest] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", port), self._handler())  # 0: the OS picks a free port
        self._server.daemon_threads = True
        self._server.block_on_close = False
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="judge-double", daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def __enter__(self) -> "JudgeDouble":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def _handler(self):
        double = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's naming)
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                with double._lock:
                    double.requests.append(SeenRequest(self.path, dict(self.headers), body))
                if self.path.rstrip("/") != "/v1/chat/completions":
                    return self._send(404, {"error": {"message": f"no route {self.path}"}})
                reply = double.answer(body)
                if reply.delay_s:
                    time.sleep(reply.delay_s)
                if reply.status != 200:
                    return self._send(reply.status, {"error": {"message": "judge double told to fail"}})
                self._send(200, {"id": "judge-1", "object": "chat.completion", "model": body.get("model", ""),
                                 "choices": [{"index": 0, "finish_reason": "stop",
                                              "message": {"role": "assistant", "content": reply.content}}]})

            def _send(self, status: int, payload: dict) -> None:
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout tests)

            def log_message(self, *args) -> None:  # quiet: tests and the bench print their own lines
                pass

        return Handler
