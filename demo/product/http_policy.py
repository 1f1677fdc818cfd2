"""The trained policy as the product calls it: serving's OpenAI chat API, one completion per call.

Serving renders the chat with the policy's own template and records the completion as a ModelCall (token ids,
behaviour logprobs, the version that served it); the reply's `id` is that ModelCall's request id, which the
SDK's tool calls link to. The session, agent id and role travel in the x-liverl-* headers.
"""

from __future__ import annotations

from dataclasses import dataclass

from liverl.contracts import names

ANY_MODEL = ""  # serving accepts "" or its registered model name


@dataclass(frozen=True)
class ChatCompletion:
    """One served chat completion. Produced by HttpChatPolicy, consumed by the real session runner."""

    text: str
    request_id: str  # the recorded ModelCall's request id (the reply's id)
    policy_version: str
    completion_tokens: int
    finish_reason: str


class ServingUnavailable(RuntimeError):
    """Serving answered with an error or not at all."""


class HttpChatPolicy:
    """A thread-safe client of serving's /v1/chat/completions with per-call max_tokens."""

    def __init__(self, base_url: str, api_key: str = "", temperature: float = 1.0, top_p: float = 1.0,
                 timeout_s: float = 60.0, model: str = ANY_MODEL,
                 max_tokens_cap: int | None = None) -> None:
        import httpx

        headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
        self.temperature, self.top_p, self.model = temperature, top_p, model
        self.max_tokens_cap = max_tokens_cap  # a ceiling on every task's own max_tokens (slow machines, tests)
        self._http = httpx.Client(base_url=base_url.rstrip("/"), headers=headers, timeout=timeout_s)

    def chat(self, messages: list[dict], max_tokens: int, session_id: str, agent_role: str,
             agent_id: str = "main") -> ChatCompletion:
        import httpx

        if self.max_tokens_cap is not None:
            max_tokens = min(max_tokens, self.max_tokens_cap)
        body = {"model": self.model, "messages": messages, "max_tokens": max_tokens,
                "temperature": self.temperature, "top_p": self.top_p}
        headers = {names.META_SESSION_ID: session_id, names.META_AGENT_ROLE: agent_role,
                   names.META_AGENT_ID: agent_id}
        try:
            reply = self._http.post("/v1/chat/completions", json=body, headers=headers)
        except httpx.HTTPError as error:
            raise ServingUnavailable(f"serving at {self._http.base_url} did not answer ({error}); "
                                     "is `liverl serve` running on serving.http_port?") from error
        if reply.status_code != 200:
            raise ServingUnavailable(f"serving answered {reply.status_code}: {reply.text[:300]}")
        payload = reply.json()
        choice = payload["choices"][0]
        return ChatCompletion(
            text=choice["message"].get("content") or "",
            request_id=payload["id"],
            policy_version=reply.headers.get(names.META_POLICY_VERSION, ""),
            completion_tokens=int(payload.get("usage", {}).get("completion_tokens", 0)),
            finish_reason=choice.get("finish_reason") or "",
        )

    def close(self) -> None:
        self._http.close()
