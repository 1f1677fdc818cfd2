"""The body of POST /v1/responses (OpenAI's Responses API), checked strictly as serving.http.openai_schema checks chat.

Served: `input` as a string or a list of message, function_call and function_call_output items (content as a
string or text parts), `instructions`, function `tools`, `tool_choice` ("auto", "none", or forced: "required" or
a named function, served by a forced reply opening as chat's: serving.http.chat.ForcedToolCall), `max_output_tokens`,
`temperature`, `top_p`, `seed` (liverl's extension, as in chat), `metadata`, `user`, `stream`,
`previous_response_id`, `store` and `include: ["message.output_text.logprobs"]`.

Refused with a message that says what to send instead, never dropped: unknown input item types, built-in tools
(web_search, file_search, ...), and every option whose effect this server cannot give (`unsupported()`):
parallel_tool_calls false, background responses, reasoning options, structured output formats, stored prompts,
conversations, automatic truncation, top_logprobs. Unknown fields are ignored, as for chat (OpenAI adds fields
often).
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import Discriminator, Field, StringConstraints, Tag, ValidationInfo, field_validator

from serving.generation import INT32_MAX, INT64_MAX, INT64_MIN, BadRequest
from serving.http.chat import ForcedToolCall, forced_tool_call
from serving.http.openai_schema import MAX_MESSAGES, MAX_TOOLS, FunctionName, Metadata, Name, Strict, text_of

ITEM_TYPES = ("message", "function_call", "function_call_output")
LOGPROBS_INCLUDE = "message.output_text.logprobs"
CallId = Annotated[str, StringConstraints(min_length=1, max_length=256)]


class MessageItem(Strict):
    """A message; an assistant message sent back (the output of an earlier response) has output_text parts."""

    type: Literal["message"] = "message"
    role: Literal["system", "developer", "user", "assistant"]
    content: str  # a list of text parts arrives joined (text_of)

    @field_validator("content", mode="before")
    @classmethod
    def _joined(cls, content: Any) -> Any:
        return text_of(content)


class FunctionCallItem(Strict):
    """A function call the model made (sent back as input, before its output)."""

    type: Literal["function_call"]
    call_id: CallId
    name: FunctionName
    arguments: str  # JSON text, as the model wrote it


class FunctionCallOutputItem(Strict):
    """What the caller's function returned for a call_id."""

    type: Literal["function_call_output"]
    call_id: CallId
    output: str  # a list of text parts arrives joined (text_of)

    @field_validator("output", mode="before")
    @classmethod
    def _joined(cls, output: Any) -> Any:
        return text_of(output)


def _item_type(item: Any) -> str | None:
    if isinstance(item, dict):
        return item.get("type", "message")  # an easy input message ({"role", "content"}) has no type
    return getattr(item, "type", None)


InputItem = Annotated[Annotated[MessageItem, Tag("message")] | Annotated[FunctionCallItem, Tag("function_call")]
                      | Annotated[FunctionCallOutputItem, Tag("function_call_output")], Discriminator(_item_type)]


class FunctionTool(Strict):
    type: Literal["function"]
    name: FunctionName
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class NamedFunctionChoice(Strict):
    type: Literal["function"]
    name: FunctionName


class ResponsesRequest(Strict):
    model: Name = ""
    input: Annotated[list[InputItem], Field(min_length=1, max_length=MAX_MESSAGES)]  # a string: one user message
    instructions: str | None = None
    tools: Annotated[list[FunctionTool], Field(max_length=MAX_TOOLS)] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedFunctionChoice | None = None
    parallel_tool_calls: bool | None = None
    max_output_tokens: int | None = Field(None, ge=-INT32_MAX, le=INT32_MAX)
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = Field(None, ge=INT64_MIN, le=INT64_MAX)  # liverl's extension, as chat's seed
    metadata: Metadata | None = None  # {"liverl_session_id": ...} names the session (serving.recording.session_ids)
    user: Any = None  # a string names the session by its keyed pseudonym (serving.recording.session_ids), as in chat
    stream: bool = False
    previous_response_id: Name | None = None
    store: bool | None = None  # false: not kept, so it cannot be continued by previous_response_id
    include: Annotated[list[str], Field(max_length=16)] | None = None
    top_logprobs: int | None = Field(None, ge=0, le=20)
    # Known options whose effect this server cannot give: refused when set (unsupported()).
    background: bool | None = None
    reasoning: dict[str, Any] | None = None
    text: dict[str, Any] | None = None
    truncation: Literal["auto", "disabled"] | None = None
    conversation: Any = None
    prompt: Any = None
    max_tool_calls: int | None = None
    # What the shared sampling step reads (serving.http.completions._begin) and Responses does not have.
    top_k: ClassVar[None] = None
    stop: ClassVar[None] = None

    @field_validator("input", mode="before")
    @classmethod
    def _known_items(cls, items: Any) -> Any:
        if isinstance(items, str):
            return [{"role": "user", "content": items}]
        for index, item in enumerate(items if isinstance(items, list) else ()):
            if not isinstance(item, dict):
                raise ValueError(f"item {index} is not an object: send message, function_call and "
                                 "function_call_output items")
            kind = item.get("type", "message")
            if kind not in ITEM_TYPES:
                hint = " (to refer to earlier items, continue their response with previous_response_id)" \
                    if kind == "item_reference" else ""
                raise ValueError(f"item {index} has type {str(kind)[:40]!r}, which this server does not take: send "
                                 f"message, function_call and function_call_output items{hint}")
        return items

    @field_validator("tools", mode="before")
    @classmethod
    def _function_tools_only(cls, tools: Any) -> Any:
        for index, tool in enumerate(tools if isinstance(tools, list) else ()):
            kind = tool.get("type") if isinstance(tool, dict) else None
            if kind != "function":
                raise ValueError(f"tool {index} is {str(kind)[:40]!r}: built-in tools (web_search, file_search, "
                                 'code_interpreter, ...) are not available here; offer function tools {"type": '
                                 '"function", "name": ..., "parameters": {...}} and run them yourself')
        return tools

    @field_validator("tool_choice")
    @classmethod
    def _forcing_an_offered_tool(cls, choice, info: ValidationInfo):
        """A forced choice needs tools, and a named function must be one of them (serving.http.chat.forced_tool_call).
        `tools` is validated first; when it failed, its own error is the one reported."""
        if "tools" in info.data:
            forced_tool_call(choice == "required", _named(choice), [t.name for t in info.data["tools"] or ()])
        return choice

    @property
    def keeps(self) -> bool:
        """Whether the response is kept for previous_response_id (OpenAI's default: store true)."""
        return self.store is not False

    @property
    def wants_logprobs(self) -> bool:
        return LOGPROBS_INCLUDE in (self.include or ())

    def tool_dicts(self) -> list[dict[str, Any]] | None:
        """The offered tools in chat's shape, as the chat template renders them (none under tool_choice "none")."""
        if not self.tools or self.tool_choice == "none":
            return None
        return [{"type": "function", "function": t.model_dump(exclude_none=True, exclude={"type"})}
                for t in self.tools]

    def forced_tool_call(self) -> ForcedToolCall | None:
        """The tool call tool_choice forces ("required" or a named function), None when it forces none."""
        return forced_tool_call(self.tool_choice == "required", _named(self.tool_choice),
                                [t.name for t in self.tools or ()])


def _named(choice: Any) -> str | None:
    return choice.name if isinstance(choice, NamedFunctionChoice) else None


def unsupported(request: ResponsesRequest) -> BadRequest | None:
    """The first option of the request this server cannot honour, as the refusal to send; None when all can be."""
    refusal = _first_refusal(request)
    return BadRequest("unsupported", refusal[1], refusal[0]) if refusal else None


def _first_refusal(r: ResponsesRequest) -> tuple[str, str] | None:
    if r.parallel_tool_calls is False:
        return "parallel_tool_calls", "parallel_tool_calls false is not enforced by this server: send true or " \
                                      "leave it out"
    if r.background:
        return "background", "background responses are not supported: send background false or leave it out " \
                             "(stream a long response instead)"
    if r.reasoning and any(v is not None for v in r.reasoning.values()):
        return "reasoning", "reasoning options are not supported: the policy served is not a reasoning model; leave " \
                            "reasoning out"
    text = r.text or {}
    output_format = text.get("format")
    if output_format is not None and not (isinstance(output_format, dict) and output_format.get("type") == "text"):
        return "text.format", "only text output is served (no JSON schema or JSON mode: decoding is not " \
                              'constrained): send text {"format": {"type": "text"}} or leave it out'
    if text.get("verbosity") is not None:
        return "text.verbosity", "text.verbosity is not applied by this server: leave it out"
    if r.truncation == "auto":
        return "truncation", 'truncation "auto" is not applied: a conversation longer than the model is refused ' \
                             '(400 too-long); send "disabled" or leave it out'
    for value in r.include or ():
        if value != LOGPROBS_INCLUDE:
            return "include", f"include {value[:60]!r} is not available here: only {LOGPROBS_INCLUDE!r} is"
    if r.top_logprobs:
        return "top_logprobs", "top_logprobs is not available: only the sampled token's logprob is returned " \
                               f"(include {LOGPROBS_INCLUDE!r}); send 0 or leave it out"
    if r.conversation is not None:
        return "conversation", "conversations are not kept here: continue a response with previous_response_id, " \
                               "or send the whole conversation as input"
    if r.prompt is not None:
        return "prompt", "stored prompt templates are not available here: send instructions and input"
    if r.max_tool_calls is not None:
        return "max_tool_calls", "max_tool_calls limits built-in tool calls, which are not available here: leave it out"
    return None
