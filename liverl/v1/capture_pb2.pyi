from liverl.v1 import session_event_pb2 as _session_event_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CaptureRequest(_message.Message):
    __slots__ = ("events",)
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[_session_event_pb2.SessionEvent]
    def __init__(self, events: _Optional[_Iterable[_Union[_session_event_pb2.SessionEvent, _Mapping]]] = ...) -> None: ...

class Rejection(_message.Message):
    __slots__ = ("index", "event_id", "reason", "message")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    index: int
    event_id: str
    reason: str
    message: str
    def __init__(self, index: _Optional[int] = ..., event_id: _Optional[str] = ..., reason: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class CaptureResponse(_message.Message):
    __slots__ = ("accepted", "dropped_opt_out", "rejected")
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    DROPPED_OPT_OUT_FIELD_NUMBER: _ClassVar[int]
    REJECTED_FIELD_NUMBER: _ClassVar[int]
    accepted: int
    dropped_opt_out: int
    rejected: _containers.RepeatedCompositeFieldContainer[Rejection]
    def __init__(self, accepted: _Optional[int] = ..., dropped_opt_out: _Optional[int] = ..., rejected: _Optional[_Iterable[_Union[Rejection, _Mapping]]] = ...) -> None: ...
