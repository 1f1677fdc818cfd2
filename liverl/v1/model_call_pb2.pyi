from liverl.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ModelCall(_message.Message):
    __slots__ = ("event_id", "request_id", "session_id", "tenant_id", "schema_version", "agent_role", "agent_id", "policy_version", "model_name", "prompt_token_ids", "completion_token_ids", "completion_logprobs", "sampling", "request_time_ms", "first_token_time_ms", "finish_time_ms", "finish_reason", "api", "origin", "adapter_name", "base_version")
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    AGENT_ROLE_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    MODEL_NAME_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_FIELD_NUMBER: _ClassVar[int]
    REQUEST_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    FIRST_TOKEN_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    FINISH_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    API_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_FIELD_NUMBER: _ClassVar[int]
    ADAPTER_NAME_FIELD_NUMBER: _ClassVar[int]
    BASE_VERSION_FIELD_NUMBER: _ClassVar[int]
    event_id: str
    request_id: str
    session_id: str
    tenant_id: str
    schema_version: int
    agent_role: _common_pb2.AgentRole
    agent_id: str
    policy_version: str
    model_name: str
    prompt_token_ids: _containers.RepeatedScalarFieldContainer[int]
    completion_token_ids: _containers.RepeatedScalarFieldContainer[int]
    completion_logprobs: _containers.RepeatedScalarFieldContainer[float]
    sampling: _common_pb2.SamplingParams
    request_time_ms: int
    first_token_time_ms: int
    finish_time_ms: int
    finish_reason: str
    api: str
    origin: str
    adapter_name: str
    base_version: str
    def __init__(self, event_id: _Optional[str] = ..., request_id: _Optional[str] = ..., session_id: _Optional[str] = ..., tenant_id: _Optional[str] = ..., schema_version: _Optional[int] = ..., agent_role: _Optional[_Union[_common_pb2.AgentRole, str]] = ..., agent_id: _Optional[str] = ..., policy_version: _Optional[str] = ..., model_name: _Optional[str] = ..., prompt_token_ids: _Optional[_Iterable[int]] = ..., completion_token_ids: _Optional[_Iterable[int]] = ..., completion_logprobs: _Optional[_Iterable[float]] = ..., sampling: _Optional[_Union[_common_pb2.SamplingParams, _Mapping]] = ..., request_time_ms: _Optional[int] = ..., first_token_time_ms: _Optional[int] = ..., finish_time_ms: _Optional[int] = ..., finish_reason: _Optional[str] = ..., api: _Optional[str] = ..., origin: _Optional[str] = ..., adapter_name: _Optional[str] = ..., base_version: _Optional[str] = ...) -> None: ...
