"""`liverl topics`: print a topic's records as JSON lines, decoded from the contracts.

    liverl topics events --tenant acme --session s-1      # every SessionEvent of one session
    liverl topics calls --tail 5                          # the last 5 ModelCalls of each partition
    liverl topics dead-letters --follow                   # wait for new dead letters

TOPIC_OR_ALIAS is a topic name or an alias of the configured ones: "events" (kafka.session_events_topic,
SessionEvent), "calls" (kafka.model_calls_topic, ModelCall), "dead-letters" (kafka.dead_letters_topic,
the JSON envelope). Each line: {"topic", "partition", "offset", "timestamp_ms", "key", "headers",
"value"} with the value in the protobuf JSON mapping. A session id that holds personal data is stored (and
keyed) as its pseudonym under its tenant's key: --session takes either, the id as the product knows it or the
pseudonym.
Without --follow it stops at the end the topic had when it started. Start: --from-beginning (the default),
--from-offset N or --tail N, per partition.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable, Iterator

ALIASES = {"events": "session_events_topic", "calls": "model_calls_topic", "dead-letters": "dead_letters_topic"}
HIGH_WATER_TIMEOUT_S = 30.0


def add_arguments(parser) -> None:
    parser.add_argument("topic", metavar="TOPIC_OR_ALIAS", help='a topic name, or "events", "calls", "dead-letters"')
    start = parser.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true", help="from each partition's first record (default)")
    start.add_argument("--from-offset", type=int, metavar="N", help="from offset N of each partition")
    start.add_argument("--tail", type=int, metavar="N", help="the last N records of each partition")
    parser.add_argument("--tenant", help="only this tenant's records")
    parser.add_argument("--session", help="only this session's records (its id, or the pseudonym it is stored under)")
    parser.add_argument("--max", type=int, metavar="N", help="stop after printing N records")
    parser.add_argument("--follow", action="store_true", help="keep waiting for new records (Ctrl-C stops)")


def run(config, args) -> int:
    import logging

    logging.getLogger("kafka").setLevel(logging.CRITICAL)
    topic = resolve_topic(config.kafka, args.topic)
    decode = decoder_for(config.kafka, topic)
    from liverl.privacy import key_store, opener_for, tenant_redactor
    from liverl.privacy.pseudonyms import Pseudonyms

    pseudonyms = Pseudonyms(key_store(config), config.privacy.key_cache_size)
    redactor_of = lambda tenant: tenant_redactor(config, tenant, pseudonyms)  # noqa: E731
    for line in read_lines(config.kafka, topic, decode, args, redactor_of, opener_for(config)):
        print(line, flush=True)
    return 0


def resolve_topic(kafka, name: str) -> str:
    return getattr(kafka, ALIASES[name]) if name in ALIASES else name


# --- decoding ------------------------------------------------------------------------------------

Decoded = tuple[dict, str | None, str | None]  # (value as JSON, tenant, session); None: unknown
# A ModelCall's token ids are what the user wrote and read, exact (the trainer needs them): never printed; what a
# person reads is redacted text (README, Security model).
EXACT_TEXT_FIELDS = frozenset({"prompt_token_ids", "completion_token_ids"})


def decoder_for(kafka, topic: str) -> Callable[[bytes], Decoded]:
    """The decoder of the topic's contract; unknown topics come out as JSON if they are, else base64."""
    if topic in (kafka.session_events_topic, kafka.model_calls_topic):
        from google.protobuf import json_format

        from liverl.v1 import model_call_pb2, session_event_pb2

        message_type = (session_event_pb2.SessionEvent if topic == kafka.session_events_topic
                        else model_call_pb2.ModelCall)

        def decode_message(value: bytes) -> Decoded:
            message = message_type.FromString(value)
            data = json_format.MessageToDict(message, preserving_proto_field_name=True)
            for field in EXACT_TEXT_FIELDS.intersection(data):
                data[field] = f"[NOT SHOWN: {len(data[field])} token ids, the user's exact text]"
            return data, message.tenant_id, message.session_id
        return decode_message
    return decode_json


def decode_json(value: bytes) -> Decoded:
    envelope = json.loads(value)
    if not isinstance(envelope, dict):
        return {"json": envelope}, None, None
    return envelope, envelope.get("tenant_id"), envelope.get("session_id")


def as_line(record, decode: Callable[[bytes], Decoded], opener=None) -> tuple[dict, str | None, str | None]:
    """The record as a JSON-ready dict, with the tenant and session it belongs to (None: unknown). opener:
    opens values sealed with their subject's key (liverl.privacy.sealing; what they hold is redacted)."""
    from liverl.privacy.sealing import Forgotten

    headers = {name: _text(value) for name, value in record.headers or ()}
    key = _text(record.key) if record.key is not None else None
    try:
        plain = record.value if opener is None else opener.open(record.topic, record.key, record.headers or (),
                                                                 record.value)
        value, tenant, session = decode(plain or b"")
    except Forgotten:
        value = {"erased": "its subject was forgotten (`liverl forget`): the key that sealed it is gone"}
        tenant, session = headers.get("liverl-tenant"), None
    except Exception as error:  # noqa: BLE001 - one undecodable record is shown, never fatal
        value = {"undecodable": f"{type(error).__name__}: {error}",
                 "value_b64": base64.b64encode(record.value or b"").decode()}
        tenant, session = headers.get("liverl-tenant"), None
    if session is None and key and "/" in key:  # capture's key is "<tenant>/<session>"
        session = key.split("/", 1)[1]
    line = {"topic": record.topic, "partition": record.partition, "offset": record.offset,
            "timestamp_ms": record.timestamp, "key": key, "headers": headers, "value": value}
    return line, tenant, session


def _text(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(raw).decode()


# --- reading -------------------------------------------------------------------------------------

def session_matcher(session: str, redactor_of: Callable[[str], object] | None = None
                    ) -> Callable[[str | None, str | None], bool]:
    """(tenant, session id of a record) -> whether the record is the asked session's: its id as given, or the
    pseudonym the tenant's redaction stores it under when it holds personal data (the tenant's keyed hash, the
    same in every stage, made once per tenant). redactor_of: tenant -> its Redactor (None: the id as given)."""
    stored: dict[str, str] = {}

    def matches(tenant: str | None, found: str | None) -> bool:
        if found == session:
            return True
        if found is None or tenant is None or redactor_of is None:
            return False
        if tenant not in stored:
            stored[tenant] = redactor_of(tenant).redact_id(session)
        return found == stored[tenant]
    return matches


def read_lines(kafka, topic: str, decode: Callable[[bytes], Decoded], args,
               redactor_of: Callable[[str], object] | None = None, opener=None) -> Iterator[str]:
    """JSON lines of the topic's records that pass the tenant and session filters, in each partition's order.
    redactor_of: tenant -> the Redactor whose pseudonyms --session also matches (liverl.privacy.tenant_redactor;
    None: the id as given only); opener: see as_line."""
    from kafka import KafkaConsumer, TopicPartition

    asked = session_matcher(args.session, redactor_of) if args.session else None
    consumer = KafkaConsumer(**kafka.client_kwargs(), group_id=None, enable_auto_commit=False,
                             auto_offset_reset="earliest")
    try:
        ids = consumer.partitions_for_topic(topic)
        if not ids:
            raise ValueError(f"topic {topic!r} does not exist; use a topic name or one of {sorted(ALIASES)}")
        partitions = [TopicPartition(topic, p) for p in sorted(ids)]
        consumer.assign(partitions)
        ends = _high_water_marks(consumer, partitions)
        firsts = consumer.beginning_offsets(partitions)
        for tp in partitions:
            consumer.seek(tp, _start(args, firsts[tp], ends[tp]))
        consumer.resume(*partitions)
        printed = 0
        while args.max is None or printed < args.max:
            if not args.follow and all(consumer.position(tp) >= ends[tp] for tp in partitions):
                return
            for tp, records in consumer.poll(timeout_ms=500).items():
                for record in records:
                    if not args.follow and record.offset >= ends[tp]:
                        continue
                    line, tenant, session = as_line(record, decode, opener)
                    if (args.tenant and tenant != args.tenant) or (asked and not asked(tenant, session)):
                        continue
                    yield json.dumps(line, ensure_ascii=False)
                    printed += 1
                    if args.max is not None and printed >= args.max:
                        return
    finally:
        consumer.close()


def _start(args, first: int, end: int) -> int:
    """Where a partition starts (never before its first record still kept)."""
    if args.tail is not None:
        return max(first, end - max(0, args.tail))
    if args.from_offset is not None:
        return max(first, args.from_offset)
    return first


def _high_water_marks(consumer, partitions) -> dict:
    """Each partition's high-water mark from a real fetch response: `end_offsets` is only the starting
    guess, since some Kafka-protocol brokers answer it with the start of the last batch."""
    guesses = consumer.end_offsets(partitions)
    for tp in partitions:
        consumer.seek(tp, guesses.get(tp) or 0)
    marks: dict = {}
    deadline = time.monotonic() + HIGH_WATER_TIMEOUT_S
    while len(marks) < len(partitions):
        if time.monotonic() > deadline:
            missing = [f"{tp.topic}:{tp.partition}" for tp in partitions if tp not in marks]
            raise TimeoutError(f"no fetch response for {missing} within {HIGH_WATER_TIMEOUT_S:.0f} s; "
                               "is the broker up? (`liverl status`)")
        consumer.poll(timeout_ms=200)
        for tp in partitions:
            mark = consumer.highwater(tp)
            if mark is not None and tp not in marks:
                marks[tp] = mark
                consumer.pause(tp)
    return marks

