from liverl.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class FeedbackKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FEEDBACK_KIND_UNSPECIFIED: _ClassVar[FeedbackKind]
    FEEDBACK_KIND_THUMBS_UP: _ClassVar[FeedbackKind]
    FEEDBACK_KIND_THUMBS_DOWN: _ClassVar[FeedbackKind]
    FEEDBACK_KIND_EDIT_KEPT: _ClassVar[FeedbackKind]
    FEEDBACK_KIND_EDIT_REVERTED: _ClassVar[FeedbackKind]
    FEEDBACK_KIND_DISSATISFIED_FOLLOWUP: _ClassVar[FeedbackKind]
    FEEDBACK_KIND_RATING: _ClassVar[FeedbackKind]
FEEDBACK_KIND_UNSPECIFIED: FeedbackKind
FEEDBACK_KIND_THUMBS_UP: FeedbackKind
FEEDBACK_KIND_THUMBS_DOWN: FeedbackKind
FEEDBACK_KIND_EDIT_KEPT: FeedbackKind
FEEDBACK_KIND_EDIT_REVERTED: FeedbackKind
FEEDBACK_KIND_DISSATISFIED_FOLLOWUP: FeedbackKind
FEEDBACK_KIND_RATING: FeedbackKind

class SessionEvent(_message.Message):
    __slots__ = ("event_id", "session_id", "tenant_id", "schema_version", "event_time_ms", "ingest_time_ms", "user_id", "agent_role", "agent_id", "sequence", "session_start", "session_end", "user_message", "tool_call", "tool_result", "feedback", "outcome", "summary", "subagent_created", "task_assigned", "subagent_finished")
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    EVENT_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    INGEST_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_ROLE_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    SESSION_START_FIELD_NUMBER: _ClassVar[int]
    SESSION_END_FIELD_NUMBER: _ClassVar[int]
    USER_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_FIELD_NUMBER: _ClassVar[int]
    TOOL_RESULT_FIELD_NUMBER: _ClassVar[int]
    FEEDBACK_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    SUBAGENT_CREATED_FIELD_NUMBER: _ClassVar[int]
    TASK_ASSIGNED_FIELD_NUMBER: _ClassVar[int]
    SUBAGENT_FINISHED_FIELD_NUMBER: _ClassVar[int]
    event_id: str
    session_id: str
    tenant_id: str
    schema_version: int
    event_time_ms: int
    ingest_time_ms: int
    user_id: str
    agent_role: _common_pb2.AgentRole
    agent_id: str
    sequence: int
    session_start: SessionStart
    session_end: SessionEnd
    user_message: UserMessage
    tool_call: ToolCall
    tool_result: ToolResult
    feedback: Feedback
    outcome: Outcome
    summary: Summary
    subagent_created: SubAgentCreated
    task_assigned: TaskAssigned
    subagent_finished: SubAgentFinished
    def __init__(self, event_id: _Optional[str] = ..., session_id: _Optional[str] = ..., tenant_id: _Optional[str] = ..., schema_version: _Optional[int] = ..., event_time_ms: _Optional[int] = ..., ingest_time_ms: _Optional[int] = ..., user_id: _Optional[str] = ..., agent_role: _Optional[_Union[_common_pb2.AgentRole, str]] = ..., agent_id: _Optional[str] = ..., sequence: _Optional[int] = ..., session_start: _Optional[_Union[SessionStart, _Mapping]] = ..., session_end: _Optional[_Union[SessionEnd, _Mapping]] = ..., user_message: _Optional[_Union[UserMessage, _Mapping]] = ..., tool_call: _Optional[_Union[ToolCall, _Mapping]] = ..., tool_result: _Optional[_Union[ToolResult, _Mapping]] = ..., feedback: _Optional[_Union[Feedback, _Mapping]] = ..., outcome: _Optional[_Union[Outcome, _Mapping]] = ..., summary: _Optional[_Union[Summary, _Mapping]] = ..., subagent_created: _Optional[_Union[SubAgentCreated, _Mapping]] = ..., task_assigned: _Optional[_Union[TaskAssigned, _Mapping]] = ..., subagent_finished: _Optional[_Union[SubAgentFinished, _Mapping]] = ...) -> None: ...

class SessionStart(_message.Message):
    __slots__ = ("task_family", "task_id", "attributes", "token_budget")
    class AttributesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TASK_FAMILY_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    TOKEN_BUDGET_FIELD_NUMBER: _ClassVar[int]
    task_family: str
    task_id: str
    attributes: _containers.ScalarMap[str, str]
    token_budget: int
    def __init__(self, task_family: _Optional[str] = ..., task_id: _Optional[str] = ..., attributes: _Optional[_Mapping[str, str]] = ..., token_budget: _Optional[int] = ...) -> None: ...

class SessionEnd(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class UserMessage(_message.Message):
    __slots__ = ("text", "follow_up")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    FOLLOW_UP_FIELD_NUMBER: _ClassVar[int]
    text: str
    follow_up: bool
    def __init__(self, text: _Optional[str] = ..., follow_up: _Optional[bool] = ...) -> None: ...

class ToolCall(_message.Message):
    __slots__ = ("call_id", "name", "arguments_json", "request_id", "valid", "error")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_JSON_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    VALID_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    name: str
    arguments_json: str
    request_id: str
    valid: bool
    error: str
    def __init__(self, call_id: _Optional[str] = ..., name: _Optional[str] = ..., arguments_json: _Optional[str] = ..., request_id: _Optional[str] = ..., valid: _Optional[bool] = ..., error: _Optional[str] = ...) -> None: ...

class ToolResult(_message.Message):
    __slots__ = ("call_id", "output", "is_error", "chunk_ids")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    IS_ERROR_FIELD_NUMBER: _ClassVar[int]
    CHUNK_IDS_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    output: str
    is_error: bool
    chunk_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, call_id: _Optional[str] = ..., output: _Optional[str] = ..., is_error: _Optional[bool] = ..., chunk_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class Feedback(_message.Message):
    __slots__ = ("kind", "value", "target_call_id", "comment")
    KIND_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    TARGET_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    COMMENT_FIELD_NUMBER: _ClassVar[int]
    kind: FeedbackKind
    value: float
    target_call_id: str
    comment: str
    def __init__(self, kind: _Optional[_Union[FeedbackKind, str]] = ..., value: _Optional[float] = ..., target_call_id: _Optional[str] = ..., comment: _Optional[str] = ...) -> None: ...

class Outcome(_message.Message):
    __slots__ = ("success", "score", "detail", "gold_chunk_ids", "answer_chunk_ids", "metrics")
    class MetricsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    SUCCESS_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    GOLD_CHUNK_IDS_FIELD_NUMBER: _ClassVar[int]
    ANSWER_CHUNK_IDS_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    success: bool
    score: float
    detail: str
    gold_chunk_ids: _containers.RepeatedScalarFieldContainer[str]
    answer_chunk_ids: _containers.RepeatedScalarFieldContainer[str]
    metrics: _containers.ScalarMap[str, float]
    def __init__(self, success: _Optional[bool] = ..., score: _Optional[float] = ..., detail: _Optional[str] = ..., gold_chunk_ids: _Optional[_Iterable[str]] = ..., answer_chunk_ids: _Optional[_Iterable[str]] = ..., metrics: _Optional[_Mapping[str, float]] = ...) -> None: ...

class Summary(_message.Message):
    __slots__ = ("text", "request_id")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    text: str
    request_id: str
    def __init__(self, text: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class SubAgentCreated(_message.Message):
    __slots__ = ("subagent_id", "name")
    SUBAGENT_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    subagent_id: str
    name: str
    def __init__(self, subagent_id: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class TaskAssigned(_message.Message):
    __slots__ = ("subagent_id", "task_id", "description", "stage")
    SUBAGENT_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    STAGE_FIELD_NUMBER: _ClassVar[int]
    subagent_id: str
    task_id: str
    description: str
    stage: int
    def __init__(self, subagent_id: _Optional[str] = ..., task_id: _Optional[str] = ..., description: _Optional[str] = ..., stage: _Optional[int] = ...) -> None: ...

class SubAgentFinished(_message.Message):
    __slots__ = ("subagent_id", "task_id", "success", "steps")
    SUBAGENT_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    SUCCESS_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    subagent_id: str
    task_id: str
    success: bool
    steps: int
    def __init__(self, subagent_id: _Optional[str] = ..., task_id: _Optional[str] = ..., success: _Optional[bool] = ..., steps: _Optional[int] = ...) -> None: ...
