"""The SDK's background sender: a bounded in-memory queue, batches over gRPC, retries with backoff, and
a disk spool for when the capture service is unreachable.

The caller's thread only appends to the queue (no network, no disk). When the queue is full the NEW
event is dropped (drop-newest) and counted: the queue keeps what was recorded first, so sessions
already under way keep their beginnings, and `stats()["dropped"]` says how many were lost. Batches
the service cannot take go to the spool (fsync'd) and are resent, in order, before anything newer.

Retries are bounded: a batch the service keeps failing on (deadline exceeded, internal error) is tried
`max_attempts` times with exponential backoff and jitter, then dead-lettered locally (counted, and kept in
<spool_dir>/dead-letters.capture: framed events, replayable as CaptureRequests). Only the events the
service did not settle are resent (its answer lists them: "deadline_exceeded"), never a whole batch that
was partly stored. A batch too big for the service is split; a rate-limited one waits the delay the
service asks for. Only an unreachable service (UNAVAILABLE) is waited on without limit: nothing is lost.

Nothing reaches the disk unredacted but ids: events are redacted (the capture service's detectors, `redaction`)
on their way into the spool and the dead-letter file, so a copied or forgotten folder holds none of what users
wrote. Ids (session, call and user ids) are kept as the product gave them, as its own records hold them: the
service pseudonymises an id that holds personal data with the tenant's key (liverl.privacy.pseudonyms), which
this process must never hold, and a pseudonym it could make alone would split a spooled session from its events
sent directly, or be one anyone could recompute. Events sent straight away are redacted by the service.
"""

from __future__ import annotations

import collections
import functools
import logging
import os
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from liverl.config.redaction import RedactionConfig
from liverl.io.backoff import Backoff
from liverl.io.spool import Spool, SpoolFull
from liverl.redaction import Redactor, ids_as_given
from liverl.v1 import capture_pb2, session_event_pb2

log = logging.getLogger("liverl.ingest.sdk")
CAPTURE_METHOD = "/liverl.v1.CaptureService/Capture"
# The service choked on this batch: retried a bounded number of times, then dead-lettered locally.
BOUNDED = {grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.ABORTED, grpc.StatusCode.INTERNAL,
           grpc.StatusCode.UNKNOWN, grpc.StatusCode.CANCELLED}
RESEND_REASON = "deadline_exceeded"  # a per-event answer meaning "not looked at, resend it"
RETRY_AFTER_KEY = "retry-after-s"  # trailing metadata of a rate-limited call (ingest.grpc_api)
MAX_BACKOFF_S = 5.0
DEAD_LETTER_FILE = "dead-letters.capture"


@dataclass
class SenderStats:
    recorded: int = 0
    sent: int = 0  # acknowledged by the capture service (stored in Kafka or its spool)
    rejected: int = 0
    rejected_by_reason: Counter = field(default_factory=Counter)
    dropped: int = 0  # queue full (drop-newest) or lost at close without a spool
    dropped_opt_out: int = 0
    spooled: int = 0
    retries: int = 0
    dead_lettered: int = 0  # given up on after max_attempts (kept in the local dead-letter file)
    last_error: str = ""


class BackgroundSender:
    def __init__(self, target: str, token: str, spool_dir: Path | None, max_queue_events: int = 10_000,
                 batch_size: int = 256, linger_s: float = 0.02, request_timeout_s: float = 10.0,
                 max_spool_bytes: int = 256 << 20, credentials: grpc.ChannelCredentials | None = None,
                 max_request_bytes: int = 4 << 20, max_attempts: int = 6, redaction: RedactionConfig | None = None):
        """redaction: applied to every event written to disk, ids excepted (default: the default settings)."""
        self._redactor = Redactor(redaction, pseudonym=ids_as_given)
        self.batch_size = batch_size
        self.max_attempts = max_attempts
        self._dead_letter_path = spool_dir / DEAD_LETTER_FILE if spool_dir is not None else None
        self._spool_remainder: tuple[object, int, list[bytes]] | None = None  # a spooled chunk partly settled
        self.max_request_bytes = max_request_bytes  # under the service's ingest.max_request_bytes
        self.linger_s = linger_s
        self.request_timeout_s = request_timeout_s
        self.max_queue_events = max_queue_events
        self._metadata = (("authorization", f"Bearer {token}"),)
        options = [("grpc.max_send_message_length", 64 << 20), ("grpc.max_receive_message_length", 64 << 20)]
        self._channel = (grpc.secure_channel(target, credentials, options) if credentials
                         else grpc.insecure_channel(target, options))
        self._capture = self._channel.unary_unary(CAPTURE_METHOD, request_serializer=None,
                                                  response_deserializer=capture_pb2.CaptureResponse.FromString)
        self._spool = Spool(spool_dir, max_bytes=max_spool_bytes) if spool_dir is not None else None
        self._queue: collections.deque = collections.deque()
        self._in_flight = 0
        self._cond = threading.Condition(threading.Lock())  # not re-entered: a plain lock is cheaper
        self._stopping = False
        self._stats = SenderStats()
        self._thread = threading.Thread(target=self._run, name="liverl-capture-sender", daemon=True)
        self._thread.start()

    # --- caller side: never blocks on the network --------------------------------------------

    def submit(self, event) -> bool:
        """Queue an event; False (and counted) when the queue is full or the sender is closed."""
        with self._cond:
            self._stats.recorded += 1
            if self._stopping or len(self._queue) >= self.max_queue_events:
                self._stats.dropped += 1
                return False
            self._queue.append(event)
            if len(self._queue) == 1:
                self._cond.notify()
        return True

    def flush(self, timeout_s: float) -> bool:
        """Wait until everything queued and spooled is acknowledged; False on timeout."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            self._cond.notify_all()
            while self._queue or self._in_flight or self._spool_remainder or not self._spool_empty():
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not self._thread.is_alive():
                    return False
                self._cond.wait(min(remaining, 0.05))
        return True

    def stats(self) -> dict:
        with self._cond:
            s = self._stats
            return {"recorded": s.recorded, "sent": s.sent, "rejected": s.rejected,
                    "rejected_by_reason": dict(s.rejected_by_reason), "dropped": s.dropped,
                    "dropped_opt_out": s.dropped_opt_out, "spooled": s.spooled,
                    "spool_pending": self._spool.pending() if self._spool else 0, "queued": len(self._queue),
                    "in_flight": self._in_flight, "retries": s.retries, "dead_lettered": s.dead_lettered,
                    "last_error": s.last_error}

    def close(self, timeout_s: float) -> None:
        """Flush, stop the thread, and keep what is left in the spool for the next client on this folder."""
        self.flush(timeout_s)
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self._thread.join(timeout=self.request_timeout_s + 1)
        with self._cond:
            leftover = list(self._queue)
            self._queue.clear()
        if leftover and not self._park([e.SerializeToString() for e in leftover]):
            with self._cond:
                self._stats.dropped += len(leftover)  # no spool (or a full one): these are lost, say so
            log.warning("closing with %d unsent events and no spool room: dropped", len(leftover))
        if self._spool is not None:
            self._spool.close()
        self._channel.close()

    # --- sender thread -----------------------------------------------------------------------

    def _run(self) -> None:
        backoff = Backoff(first_s=0.1, cap_s=MAX_BACKOFF_S)
        while True:
            with self._cond:
                if self._stopping:
                    return
            spooled = self._spool_remainder is not None or not self._spool_empty()
            ok = self._send_spooled() if spooled else self._send_queued()
            if ok:
                backoff.reset()
                continue
            self._park_queue()  # the service is away: persist what waits, in order, behind the spool
            with self._cond:
                self._stats.retries += 1
                self._cond.wait(backoff.next_delay())

    def _send_queued(self) -> bool:
        batch = self._take_batch()
        if not batch:
            return True
        # serialized here, once, not on the caller's thread; each blob is sized by its length
        blobs, size = [], 0
        for event in batch:
            blob = event.SerializeToString()
            if blobs and size + len(blob) > self.max_request_bytes:
                break
            blobs.append(blob)
            size += len(blob)
        if len(blobs) < len(batch):  # over the request size: the rest goes back, ahead of anything newer
            self._requeue(batch[len(blobs):])
            batch = batch[:len(blobs)]
        unsettled = self._send(blobs)
        # disk work outside the lock: submit() never waits on it
        parked = bool(unsettled) and self._park([blobs[i] for i in unsettled])
        with self._cond:
            self._in_flight = 0
            if unsettled and not parked:  # no spool room: keep them in memory, in order
                self._queue.extendleft(reversed([batch[i] for i in unsettled]))
            self._cond.notify_all()
        return not unsettled

    def _take_batch(self) -> list:
        """Up to batch_size events from the front of the queue (after a linger to let a batch form),
        counted in flight. The lock is held only to move them: submit() must not wait behind sizing."""
        with self._cond:
            if not self._queue:
                self._cond.wait(0.1)
                if not self._queue:
                    return []
            if len(self._queue) < self.batch_size and self.linger_s:
                self._cond.wait(self.linger_s)  # let a batch form; submit() only notifies on the first event
            if len(self._queue) <= self.batch_size:
                batch = list(self._queue)
                self._queue.clear()
            else:
                take = self._queue.popleft
                batch = [take() for _ in range(self.batch_size)]
            self._in_flight = len(batch)
        return batch

    def _requeue(self, events: list) -> None:
        """Give events taken from the front of the queue back to it, in order, before newer ones."""
        with self._cond:
            self._queue.extendleft(reversed(events))
            self._in_flight -= len(events)

    def _send_spooled(self) -> bool:
        if self._spool_remainder is not None:  # a chunk partly settled: only its rest is resent
            position, count, blobs = self._spool_remainder
        else:
            blobs, position = self._spool.read(self.batch_size, self.max_request_bytes)
            count = len(blobs)
            if not blobs:
                return True
        unsettled = self._send(blobs)
        with self._cond:
            if unsettled:
                self._spool_remainder = (position, count, [blobs[i] for i in unsettled])
                return False
            self._spool_remainder = None
        self._spool.commit(position, count)
        with self._cond:
            self._cond.notify_all()
        return True

    def _send(self, blobs: list[bytes]) -> list[int]:
        """Capture calls until each blob is settled (stored, refused, or dead-lettered here); returns the
        indices still unsettled because the service is away (the caller parks them), [] when all are."""
        pending = list(range(len(blobs)))
        attempts = 0
        backoff = Backoff(first_s=0.2, cap_s=MAX_BACKOFF_S)
        while pending:
            outcome, pending = self._attempt(blobs, pending)
            if outcome in ("settled", "away"):
                return pending
            if outcome == "later":  # rate-limited: waited as asked, not the batch's fault
                continue
            attempts += 1  # outcome "again": the service failed on (part of) this batch
            if attempts >= self.max_attempts:
                self._dead_letter([blobs[i] for i in pending], f"gave up after {attempts} attempts")
                return []
            with self._cond:
                self._stats.retries += 1
            if not self._pause(backoff.next_delay()):
                return pending
        return []

    def _attempt(self, blobs: list[bytes], pending: list[int]) -> tuple[str, list[int]]:
        """One Capture call over blobs[pending]: ("settled", []), ("again", to resend), ("later", to resend
        after a rate limit's delay) or ("away", pending)."""
        request = _request([blobs[i] for i in pending])
        try:
            response = self._capture(request, metadata=self._metadata, timeout=self.request_timeout_s)
        except grpc.RpcError as error:
            return self._failed(error, blobs, pending)
        resend = [pending[r.index] for r in response.rejected if r.reason == RESEND_REASON and r.index < len(pending)]
        with self._cond:
            self._stats.sent += response.accepted
            self._stats.dropped_opt_out += response.dropped_opt_out
            for rejection in response.rejected:
                if rejection.reason != RESEND_REASON:
                    self._stats.rejected += 1
                    self._stats.rejected_by_reason[rejection.reason] += 1
            if response.rejected:
                first = response.rejected[0]
                self._stats.last_error = f"{first.reason}: {first.message}"
        return ("again", resend) if resend else ("settled", [])

    def _failed(self, error: grpc.RpcError, blobs: list[bytes], pending: list[int]) -> tuple[str, list[int]]:
        code = error.code()
        with self._cond:
            self._stats.last_error = f"{code.name}: {error.details()}"
        if code == grpc.StatusCode.UNAVAILABLE:
            return "away", pending
        if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
            retry_after = dict(error.trailing_metadata() or ()).get(RETRY_AFTER_KEY)
            if retry_after is not None:  # rate-limited: wait as asked, then the same events again
                with self._cond:
                    self._stats.retries += 1
                return ("later" if self._pause(min(float(retry_after), MAX_BACKOFF_S)) else "away"), pending
            if len(pending) > 1:  # over the service's message size: halves, each on its own
                half = len(pending) // 2
                rest = self._send_part(blobs, pending[:half]) + self._send_part(blobs, pending[half:])
                return ("away", rest) if rest else ("settled", [])
        if code in BOUNDED:
            return "again", pending
        # Refused for good (bad token, wrong tenant, one event over the size limit): count it.
        with self._cond:
            self._stats.rejected += len(pending)
            self._stats.rejected_by_reason[code.name.lower()] += len(pending)
        log.warning("capture service refused a batch of %d events: %s %s", len(pending), code.name, error.details())
        return "settled", []

    def _send_part(self, blobs: list[bytes], part: list[int]) -> list[int]:
        return [part[i] for i in self._send([blobs[i] for i in part])]

    def _pause(self, seconds: float) -> bool:
        """Sleep unless the sender is closing; False when it is."""
        with self._cond:
            return not self._cond.wait_for(lambda: self._stopping, timeout=seconds)

    def _dead_letter(self, blobs: list[bytes], why: str) -> None:
        if self._dead_letter_path is not None:
            with self._dead_letter_path.open("ab") as sink:
                sink.write(_request(self._for_disk(blobs)))
                sink.flush()
                os.fsync(sink.fileno())
        with self._cond:
            self._stats.dead_lettered += len(blobs)
            self._stats.last_error = f"dead-lettered {len(blobs)} events: {why} ({self._stats.last_error})"
        log.warning("dead-lettered %d events locally (%s): %s", len(blobs), self._dead_letter_path, why)

    def _park_queue(self) -> None:
        if self._spool is None:
            return
        with self._cond:
            batch = list(self._queue)
            self._queue.clear()
        if batch and not self._park([event.SerializeToString() for event in batch]):
            with self._cond:
                self._queue.extendleft(reversed(batch))

    def _park(self, blobs: list[bytes]) -> bool:
        if self._spool is None:
            return False
        try:
            self._spool.append(self._for_disk(blobs))
        except SpoolFull as error:
            log.warning("SDK spool full: %s", error)
            return False
        with self._cond:
            self._stats.spooled += len(blobs)
        return True

    def _for_disk(self, blobs: list[bytes]) -> list[bytes]:
        """The events redacted as the capture service redacts them (unknown fields dropped too), but for their
        ids: kept as given, for the service to pseudonymise with the tenant's key (and to match opt-outs by)."""
        out = []
        for blob in blobs:
            event = session_event_pb2.SessionEvent.FromString(blob)
            user = event.user_id
            self._redactor.redact_message(event)
            event.user_id = user  # an id, though no join key (ID_FIELDS): the service makes it "u-<hex>"
            out.append(event.SerializeToString())
        return out

    def _spool_empty(self) -> bool:
        return self._spool is None or self._spool.empty()


def _frame(blob: bytes) -> bytes:
    """One CaptureRequest.events entry on the wire: tag (field 1, length-delimited), length, bytes."""
    return _entry_prefix(len(blob)) + blob


def _request(blobs: list[bytes]) -> bytes:
    """A serialized CaptureRequest of these events: each blob is copied once, into the request."""
    parts = []
    for blob in blobs:
        parts += (_entry_prefix(len(blob)), blob)
    return b"".join(parts)


@functools.lru_cache(maxsize=1 << 14)  # events of the same size share their prefix
def _entry_prefix(length: int) -> bytes:
    """The tag (field 1, length-delimited) and the varint length of one CaptureRequest.events entry."""
    varint = bytearray(b"\x0a")
    while True:
        byte = length & 0x7F
        length >>= 7
        if length:
            varint.append(byte | 0x80)
        else:
            varint.append(byte)
            return bytes(varint)
