"""The OpenAI request bodies serving accepts, checked strictly: types as sent, never coerced.

Types and wire bounds are checked here; the sampling values' real ranges are checked once for both
APIs in `Completions.sampling()`. Unknown fields are ignored (OpenAI adds fields often), but known
options that would change sampling and that serving cannot apply are refused, so a recorded
ModelCall always names the distribution its tokens were really drawn from.

Message content may be a string or a list of text parts (smolagents and the Agents SDK send lists): the parts
are joined into the string the policy's chat template renders (liverl.contracts.chat.content_text, what
`liverl import` reads), so a list and its string render alike. Image, audio and file parts are refused: the
policies served are text-only.

A forced tool_choice ("required" or a named function) is served by a forced reply opening
(serving.http.chat.ForcedToolCall); it is refused only without tools, or naming a function not offered.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationInfo, field_validator

from liverl.contracts.chat import content_text
from serving.generation import INT32_MAX, INT64_MAX, INT64_MIN, MAX_STOP_SEQUENCES
from serving.http.chat import ForcedToolCall, forced_tool_call

MAX_MESSAGES = 4096
MAX_TOOLS = 128
MAX_NAME_CHARS = 256
MAX_METADATA_PAIRS = 16  # OpenAI's own bounds on request metadata
MAX_METADATA_KEY_CHARS, MAX_METADATA_VALUE_CHARS = 64, 512

Name = Annotated[str, StringConstraints(max_length=MAX_NAME_CHARS)]
FunctionName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.\-]{1,64}$")]
TokenId = Annotated[int, Field(ge=0, le=INT32_MAX)]
Metadata = Annotated[dict[Annotated[str, StringConstraints(max_length=MAX_METADATA_KEY_CHARS)],
                          Annotated[str, StringConstraints(max_length=MAX_METADATA_VALUE_CHARS)]],
                     Field(max_length=MAX_METADATA_PAIRS)]


class Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore", allow_inf_nan=False)


class Sampled(Strict):
    """Fields every completion request shares."""

    model: Name = ""
    max_tokens: int | None = Field(None, ge=-INT32_MAX, le=INT32_MAX)
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = Field(None, ge=-INT32_MAX, le=INT32_MAX)
    seed: int | None = Field(None, ge=INT64_MIN, le=INT64_MAX)
    stop: str | Annotated[list[str], Field(max_length=MAX_STOP_SEQUENCES)] | None = None
    stream: bool = False
    n: int = 1
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    # vLLM's OpenAI extensions: accepted only at their neutral value, for the same reason as the penalties.
    min_p: float | None = None
    repetition_penalty: float | None = None
    # A string `user` may name the session (serving.recording.session_ids); any other value is ignored, as it always was.
    user: Any = None
    metadata: Metadata | None = None  # {"liverl_session_id": ...} names the session (serving.recording.session_ids)

    @field_validator("n")
    @classmethod
    def _one_completion(cls, n: int) -> int:
        if n != 1:
            raise ValueError("n must be 1: send one request per completion")
        return n

    @field_validator("presence_penalty", "frequency_penalty", "logit_bias")
    @classmethod
    def _not_applied(cls, value):
        if value:  # would change the distribution, and the record must name the one really sampled from
            raise ValueError("penalties and logit_bias are not applied by this server: send 0 / {} or leave it out")
        return value

    @field_validator("min_p")
    @classmethod
    def _no_min_p(cls, value: float | None) -> float | None:
        if value:  # the trainer scores tokens without it, so the record would name the wrong distribution
            raise ValueError("min_p is not applied by this server: send 0 or leave it out")
        return value

    @field_validator("repetition_penalty")
    @classmethod
    def _no_repetition_penalty(cls, value: float | None) -> float | None:
        if value is not None and value != 1:  # as min_p: the trainer could not score what it changed
            raise ValueError("repetition_penalty is not applied by this server: send 1 or leave it out")
        return value


class CompletionRequest(Sampled):
    prompt: str | list[TokenId] | list[str] | list[list[TokenId]]
    logprobs: int | None = Field(None, ge=0, le=5)


# Content part types whose text the model reads: chat's "text"; the Responses API's "input_text" and, in an
# assistant message sent back, "output_text".
TEXT_PART_TYPES = frozenset({"text", "input_text", "output_text"})
MEDIA_PART_TYPES = frozenset({"image_url", "input_image", "image", "input_audio", "audio", "input_file", "file"})


def text_of(content: Any) -> Any:
    """A message's content as the string its template renders: a list of text parts joined, anything else
    unchanged (for the strict type check). ValueError naming the part for a part that is not text."""
    if not isinstance(content, list):
        return content
    for index, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in MEDIA_PART_TYPES:
            raise ValueError(f"part {index} is {kind!r}: this model reads text only; send the content as a string "
                             'or as text parts ({"type": "text", "text": ...})')
        if kind not in TEXT_PART_TYPES or not isinstance(part.get("text"), str):
            raise ValueError(f"part {index} is not a text part: send parts shaped "
                             '{"type": "text", "text": "..."} (or "input_text" / "output_text")')
    return content_text(content)


class FunctionCall(Strict):
    name: FunctionName
    arguments: str  # JSON text, as OpenAI sends it


class ToolCall(Strict):
    id: Name | None = None
    type: Literal["function"] = "function"
    function: FunctionCall


class Message(Strict):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | None = None  # a list of text parts arrives joined (text_of)
    name: Name | None = None
    tool_calls: Annotated[list[ToolCall], Field(max_length=MAX_TOOLS)] | None = None
    tool_call_id: Name | None = None

    @field_validator("content", mode="before")
    @classmethod
    def _joined(cls, content: Any) -> Any:
        return text_of(content)


class FunctionDefinition(Strict):
    name: FunctionName
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class Tool(Strict):
    type: Literal["function"]
    function: FunctionDefinition


class NamedFunction(Strict):
    name: FunctionName


class NamedToolChoice(Strict):
    type: Literal["function"]
    function: NamedFunction


class ChatRequest(Sampled):
    messages: Annotated[list[Message], Field(min_length=1, max_length=MAX_MESSAGES)]
    tools: Annotated[list[Tool], Field(max_length=MAX_TOOLS)] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    max_completion_tokens: int | None = Field(None, ge=-INT32_MAX, le=INT32_MAX)
    logprobs: bool | None = None
    top_logprobs: int | None = Field(None, ge=0, le=20)

    @field_validator("tool_choice")
    @classmethod
    def _forcing_an_offered_tool(cls, choice, info: ValidationInfo):
        """A forced choice needs tools, and a named function must be one of them (serving.http.chat.forced_tool_call).
        `tools` is validated first; when it failed, its own error is the one reported."""
        if "tools" in info.data:
            forced_tool_call(choice == "required", _named(choice),
                             [t.function.name for t in info.data["tools"] or ()])
        return choice

    def message_dicts(self) -> list[dict[str, Any]]:
        return [m.model_dump(exclude_none=True) for m in self.messages]

    def tool_dicts(self) -> list[dict[str, Any]] | None:
        """The offered tools, as the chat template renders them and tool calls are parsed against them (none under
        tool_choice "none")."""
        if not self.tools or self.tool_choice == "none":
            return None
        return [t.model_dump(exclude_none=True) for t in self.tools]

    def forced_tool_call(self) -> ForcedToolCall | None:
        """The tool call tool_choice forces ("required" or a named function), None when it forces none."""
        return forced_tool_call(self.tool_choice == "required", _named(self.tool_choice),
                                [t.function.name for t in self.tools or ()])


def _named(choice: Any) -> str | None:
    return choice.function.name if isinstance(choice, NamedToolChoice) else None


def one_prompt(prompt: str | list) -> tuple[str | None, list[int] | None]:
    """The one prompt of a completion request: its text or its token ids. ValueError for a batch."""
    if isinstance(prompt, str):
        return prompt, None
    if prompt and all(isinstance(p, int) for p in prompt):
        return None, list(prompt)
    if len(prompt) == 1:
        return one_prompt(prompt[0])
    raise ValueError("send one prompt per request (a string or a list of token ids)")
