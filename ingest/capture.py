"""The capture core shared by the gRPC and HTTP front ends: parse, check, drop, redact, make durable.

Per event: parse -> opt-out -> validate -> dedupe -> session rules -> redact. Good events become Kafka
records keyed by (tenant, session) (docs/architecture.md, contract 1); bad ones become dead letters with their
reason; both are made durable in one delivery before the caller gets its answer, so an acknowledgement
always means "stored". The tenant is always the token's, never the payload's. An event already stored
(same tenant and event id, within ingest.dedupe_window_events) is acknowledged again, not stored twice.
Events not reached within the request's deadline are answered "deadline_exceeded": not stored, resend them.
With several replicas (ingest.replicas), events of sessions another replica owns are forwarded to it
first (ingest/routing.py) and answered with its verdict; the rest take the path above here.
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from functools import partial

from ingest.admission import RecentEvents, TenantRateLimiter
from ingest.delivery import KafkaDelivery, Record
from ingest.metrics import CaptureMetrics
from ingest.routing import Forwarded, PeerForwarder, ReplicaRing
from ingest.sessions import SessionRegistry
from ingest.subjects import CaptureSubjects, well_formed
from ingest.validation import Limits, Rejected, SessionEvent, validate
from liverl.access.opt_out import OptOut
from liverl.config import LiverlConfig
from liverl.io import records as kafka_records
from liverl.redaction import Redactor
from liverl.redaction.error_log import log_unexpected
from liverl.v1 import capture_pb2

log = logging.getLogger("liverl.ingest.capture")
DEAD_LETTER_PAYLOAD_LIMIT = 64 * 1024
PRUNE_EVERY_S = 600.0
DEADLINE_EXCEEDED = "deadline_exceeded"  # the one rejection that means "not looked at: resend"


class CaptureCore:
    def __init__(self, config: LiverlConfig, delivery: KafkaDelivery, sessions: SessionRegistry,
                 metrics: CaptureMetrics, clock: Callable[[], float] = time.time,
                 ring: ReplicaRing | None = None, peers: PeerForwarder | None = None,
                 subjects: CaptureSubjects | None = None):
        ingest = config.ingest
        self.subjects = subjects or capture_subjects(config)
        self.ring = ring
        self.peers = peers
        self.forward_timeout_s = ingest.replica_forward_timeout_s
        self.topics = config.kafka
        self.delivery = delivery
        self.sessions = sessions
        self.metrics = metrics
        self.clock = clock
        self.redaction = ingest.redaction
        self.redactor = Redactor(ingest.redaction)  # log lines and tenant-less text: ids under a key of this process
        self._tenant_redactors: dict[str, Redactor] = {}
        self.recent = RecentEvents(ingest.dedupe_window_events)
        self.rate_limiter = TenantRateLimiter(ingest.rate_limit_events_per_s, ingest.rate_limit_burst_events)
        self.handler_timeout_s = ingest.handler_timeout_s
        self.max_events_per_request = ingest.max_events_per_request
        self.limits = Limits(ingest.max_event_bytes, int(ingest.max_future_skew_s * 1000),
                             int(ingest.max_event_age_s * 1000))
        self.opt_out = OptOut.of(ingest)  # user ids arrive as the product gave them (the SDK spools them so too)
        self._last_prune = 0.0

    def redactor_for(self, tenant: str) -> Redactor:
        """The tenant's overrides, and its ids that hold personal data pseudonymised under its key in the key
        store (the process's Pseudonyms: one key cache, checked against the store on every use)."""
        if tenant not in self._tenant_redactors:
            self._tenant_redactors[tenant] = Redactor(self.redaction, tenant,
                                                      partial(self.subjects.pseudonyms.redacted_id, tenant))
        return self._tenant_redactors[tenant]

    def capture(self, tenant: str, items: Sequence, parse: Callable[[object], SessionEvent],
                api: str, time_left_s: float | None = None, forwarded: bool = False) -> capture_pb2.CaptureResponse:
        """Handle one request's events; raises SpoolFull when nothing could be made durable.
        time_left_s: the caller's own deadline, when it has one (the handler timeout applies anyway).
        forwarded: sent by another replica, which found this one the owner: take every event here."""
        started = time.perf_counter()
        deadline = time.monotonic() + min(self.handler_timeout_s, float("inf") if time_left_s is None else time_left_s)
        now_ms = int(self.clock() * 1000)
        response = capture_pb2.CaptureResponse()
        if self.opt_out.tenant(tenant):
            response.dropped_opt_out = len(items)
            self.metrics.dropped.labels("opt_out").inc(len(items))
            return response
        parsed, away = ({}, []) if forwarded else self._forward_foreign(tenant, items, parse, deadline)
        try:
            self._capture_here(tenant, items, parse, api, parsed, away, response, deadline, now_ms, started)
            self._collect_forwarded(away, response, deadline)  # after: the owners count their own in metrics
        finally:
            if away and away[0].future is not None:
                self.peers.waiting.release()
        self._maybe_prune(now_ms)
        return response

    def _capture_here(self, tenant: str, items: Sequence, parse: Callable[[object], SessionEvent], api: str,
                      parsed: dict[int, SessionEvent], away: list[Forwarded], response, deadline: float,
                      now_ms: int, started: float) -> None:
        """The events this replica owns (all but `away`'s): check, make durable, count."""
        taken = {index for batch in away for index in batch.indexes}
        redactor = self.redactor_for(tenant)
        records: list[Record] = []
        dead: list[Record] = []
        stored: set[tuple[str, str]] = set()
        accepted: list[tuple[int, object, SessionEvent]] = []  # (index, raw item, event) that passed the checks
        duplicates = 0
        redacted: Counter = Counter()
        links: list[tuple[str, str]] = []  # (user, session subject) pairs new to the key store's index
        lettered: set[str] = set()  # sessions (as keyed) of dead letters that name a user: linked and keyed too
        forgotten = self.subjects.forgotten(tenant)

        def refuse(index: int, item, event: SessionEvent | None, rejected: Rejected) -> None:
            letter = self._refused_letter(tenant, item, event, rejected, now_ms, forgotten, links, lettered)
            if letter is None:  # an item of a forgotten user: dropped like its valid events, nothing of it kept
                response.dropped_opt_out += 1
                self.metrics.dropped.labels("forgotten").inc()
                return
            response.rejected.add(index=index, event_id=event.event_id if event else "",
                                  reason=rejected.reason, message=rejected.message)
            dead.append(letter)
        for index, item in enumerate(items):
            if index in taken:
                continue
            if time.monotonic() > deadline:
                self._out_of_time(response, [i for i in range(index, len(items)) if i not in taken])
                break
            event = None
            try:
                event = parsed[index] if index in parsed else parse(item)
                if self._opted_out(tenant, event):
                    response.dropped_opt_out += 1
                    continue
                if self.subjects.forgotten_user(tenant, event.user_id, forgotten):  # erased (`liverl forget`):
                    response.dropped_opt_out += 1                                    # valid or not, dropped
                    self.metrics.dropped.labels("forgotten").inc()
                    continue
                validate(event, tenant, now_ms, self.limits)  # the user id as sent: its form is checked too
                self.subjects.pseudonymise(tenant, event)
                identity = (tenant, event.event_id)
                if identity in stored or identity in self.recent:
                    duplicates += 1  # stored before: acknowledged again, never stored twice
                    continue
                self.sessions.admit(event, now_ms)
                stored.add(identity)
                accepted.append((index, item, event))
            except Exception as error:  # noqa: BLE001 - one event's failure must never fail its batch
                refuse(index, item, event, error if isinstance(error, Rejected) else self._internal(error))
        # One prefilter scan over the request's strings instead of one per event; any doubt: event by event
        try:
            clean = redactor.none_can_change([event for _, _, event in accepted])
        except Exception:  # noqa: BLE001 - then each event is redacted (and may fail) on its own
            clean = False
        for index, item, event in accepted:
            try:
                found = None if clean else redactor.redact_message(event)
                if found:  # usually empty: Counter's += costs more than the check
                    redacted.update(found)
                self.subjects.link(tenant, event.user_id, event.session_id, links)
                records.append(self._event_record(event))
            except Exception as error:  # noqa: BLE001 - one event's failure must never fail its batch
                stored.discard((tenant, event.event_id))
                refuse(index, item, event, error if isinstance(error, Rejected) else self._internal(error))
        self.sessions.commit()
        self.subjects.write(tenant, links, {event.session_id for _, _, event in accepted} | lettered, forgotten)
        self.delivery.deliver(records + dead)
        self.recent.add(stored)
        if duplicates:
            self.metrics.duplicates.labels(tenant).inc(duplicates)
        self._count(tenant, response, redacted, len(records), duplicates, api, time.perf_counter() - started)

    def _forward_foreign(self, tenant: str, items: Sequence, parse: Callable[[object], SessionEvent],
                         deadline: float) -> tuple[dict[int, SessionEvent], list[Forwarded]]:
        """Send the events of sessions other replicas own to them (in the background); returns the events
        parsed on the way that stay here, and the batches sent. Unparseable events stay (rejected here)."""
        if self.ring is None or self.peers is None or len(self.ring.replicas) == 1:
            return {}, []
        parsed: dict[int, SessionEvent] = {}
        away: dict[str, Forwarded] = {}
        for index, item in enumerate(items):
            try:
                event = parse(item)
            except Exception:  # noqa: BLE001 - the local pass rejects and dead-letters it
                continue
            owner = self.ring.owner_of(tenant, event.session_id)
            if owner == self.ring.own_address:
                parsed[index] = event
            else:
                batch = away.setdefault(owner, Forwarded(owner))
                batch.indexes.append(index)
                batch.events.append(event)
        if away and not self.peers.waiting.acquire(blocking=False):
            return parsed, list(away.values())  # collected as "not stored: resend" (backpressure)
        for batch in away.values():
            self.peers.send(tenant, batch, min(self.forward_timeout_s, deadline - time.monotonic()))
            self.metrics.forwarded.labels(batch.owner).inc(len(batch.events))
        return parsed, list(away.values())

    def _collect_forwarded(self, away: list[Forwarded], response, deadline: float) -> None:
        """The owners' verdicts, under the caller's indexes; an owner that did not answer: resend those."""
        for batch in away:
            if batch.future is None:  # not sent: this replica had too many requests waiting on owners
                self._out_of_time(response, batch.indexes, f"this replica already has {self.peers.max_waiting} "
                                                           "requests waiting on their sessions' owners; resend "
                                                           "this event (with backoff)")
                continue
            try:
                answer = batch.future.result(timeout=max(0.0, deadline - time.monotonic()) + 1.0)
            except Exception as error:  # noqa: BLE001 - any failure of the hop means "not stored here"
                self.metrics.forward_failures.labels(batch.owner).inc()
                log.warning(json.dumps({"msg": "forwarding to the session's owner failed", "owner": batch.owner,
                                        "events": len(batch.indexes), "error": _rpc_error(error)}))
                self._out_of_time(response, batch.indexes, f"the replica owning these sessions ({batch.owner}) did "
                                                           f"not answer ({_rpc_error(error)}); resend this event")
                continue
            response.accepted += answer.accepted
            response.dropped_opt_out += answer.dropped_opt_out
            for rejected in answer.rejected:
                response.rejected.add(index=batch.indexes[rejected.index], event_id=rejected.event_id,
                                      reason=rejected.reason, message=rejected.message)

    def _out_of_time(self, response, indexes: Sequence[int], why: str = "") -> None:
        why = why or (f"the request ran past its deadline (ingest.handler_timeout_s={self.handler_timeout_s:g}); "
                      "resend this event, in a smaller batch")
        for index in indexes:
            response.rejected.add(index=index, reason=DEADLINE_EXCEEDED,
                                  message=f"not stored: {why}")

    def _refused_letter(self, tenant: str, item: object, event: SessionEvent | None, rejected: Rejected,
                        now_ms: int, forgotten: frozenset[str], links: list[tuple[str, str]],
                        lettered: set[str]) -> Record | None:
        """A refused event's dead letter, its user as the keyed pseudonym, keyed (so sealed) by its session,
        and that session linked to the user in the request's key-store write, as an accepted event's is: so
        `liverl forget --user` leaves it unreadable. With a user but no session id it is keyed by the user's
        pseudonym (the session-less key is the whole tenant's: no one user's erasure may destroy it). None:
        the item names a forgotten user (drop it, keep nothing of it)."""
        try:
            item, user, session = self.subjects.of_refused(tenant, item, event)
            if user and user in forgotten:
                return None
            keyed = (self.redactor_for(tenant).redact_id(session) if session else "") or user
            if user:
                self.subjects.link(tenant, user, keyed, links)
                lettered.add(keyed)
        except Exception as error:  # noqa: BLE001 - whose it is is unknown: dead-lettered without its content
            log_unexpected(log, "could not name the user of a refused event", error, self._scrub)
            return self.dead_letter(rejected.reason, rejected.message, tenant, b"", None, now_ms)
        return self.dead_letter(rejected.reason, rejected.message, tenant, item, event, now_ms, keyed)

    def dead_letter(self, reason: str, message: str, tenant: str, raw: object, event: SessionEvent | None,
                    now_ms: int, session_id: str = "") -> Record:
        """The contract's dead-letter JSON; the payload is redacted like anything else bound for Kafka.
        session_id: the session it belongs to as its records are keyed (they are sealed under that session's
        key); default: the redacted event's (the pseudonym its events carry), none for a raw payload."""
        try:
            if event is not None:
                copy = SessionEvent()
                copy.CopyFrom(event)
                self.redactor_for(tenant).redact_message(copy)
                payload = copy.SerializeToString()
                session_id = session_id or (copy.session_id if well_formed(copy.session_id) else "")
            else:
                blob = raw if isinstance(raw, bytes) else json.dumps(raw, default=str).encode("utf-8", "replace")
                payload, _ = self.redactor_for(tenant).redact_bytes(blob[:DEAD_LETTER_PAYLOAD_LIMIT])
        except Exception as error:  # noqa: BLE001 - an unprintable payload still gets its dead letter, without it
            log_unexpected(log, "could not encode a dead letter's payload", error, self._scrub)
            payload = b""
        self.metrics.dead_letters.labels(reason).inc()
        return kafka_records.dead_letter(self.topics.dead_letters_topic, source="ingest", reason=reason,
                                         message=self._scrub(message),  # parse errors may quote the offending value
                                         tenant_id=tenant, session_id=session_id, payload=payload, at_ms=now_ms)

    def reject_request(self, reason: str, message: str, tenant: str, summary: bytes, api: str) -> None:
        """A whole request refused (framing, body, batch size): one dead letter and a log line. summary: the
        request's encoded RefusedRequest (liverl/contracts/refused_request.py), never its body (compressed or
        binary bodies hide personal data from redaction)."""
        self.metrics.requests_rejected.labels(reason).inc()
        self.delivery.deliver([self.dead_letter(reason, message, tenant, summary, None, int(self.clock() * 1000))])
        log.warning(json.dumps({"msg": "capture request rejected", "api": api, "tenant": tenant, "reason": reason,
                                "detail": self._scrub(message)}))

    def refuse_caller(self, status: str, message: str, api: str, tenant: str = "") -> None:
        """Missing or wrong credentials, or over the rate limit: counted and logged, never dead-lettered
        (unauthenticated bytes do not reach Kafka; a rate-limited caller is told to retry)."""
        self.metrics.requests_rejected.labels(status).inc()
        if status == "permission_denied":
            self.metrics.cross_tenant.labels(tenant or "unknown").inc()
        log.warning(json.dumps({"msg": "capture request refused", "api": api, "reason": status, "detail": message}))

    def _scrub(self, text: str) -> str:
        return self.redactor.redact_text(text)

    def _opted_out(self, tenant: str, event: SessionEvent) -> bool:
        if self.opted_out(tenant, event.user_id, event.session_id):
            self.metrics.dropped.labels("opt_out").inc()
            return True
        return False

    def opted_out(self, tenant: str, user_id: str, session_id: str) -> bool:
        """The user (named, else the one the session started with) of this tenant opted out."""
        users = self.opt_out.users.get(tenant)
        if not users:
            return False
        user = user_id or self.sessions.user_of(tenant, session_id)  # the session state holds keyed pseudonyms
        return self.opt_out.user(tenant, user) or user in {self.subjects.pseudonyms.user(tenant, u) for u in users}

    def _event_record(self, event: SessionEvent) -> Record:
        return kafka_records.session_record(self.topics.session_events_topic, kafka_records.SESSION_EVENT,
                                            event.tenant_id, event.session_id, event.SerializeToString(),
                                            event.event_time_ms)

    def _count(self, tenant: str, response, redacted: Counter, stored: int, duplicates: int, api: str,
               seconds: float) -> None:
        response.accepted += stored + duplicates  # the owners of forwarded events add theirs after
        self.metrics.accepted.labels(tenant).inc(stored)
        for kind, count in redacted.items():
            self.metrics.redacted.labels(kind).inc(count)
        self.metrics.request_seconds.labels(api).observe(seconds)
        if response.rejected:
            reasons = Counter(r.reason for r in response.rejected)
            for reason, count in reasons.items():
                self.metrics.rejected.labels(reason).inc(count)
            if reasons["tenant_mismatch"]:
                self.metrics.cross_tenant.labels(tenant).inc(reasons["tenant_mismatch"])
            log.warning(json.dumps({"msg": "capture batch had rejections", "api": api, "tenant": tenant,
                                    "accepted": response.accepted, "rejected": len(response.rejected),
                                    "reasons": dict(reasons),
                                    "first": {"index": response.rejected[0].index,
                                              "message": self._scrub(response.rejected[0].message)}}))

    def _maybe_prune(self, now_ms: int) -> None:
        if now_ms / 1000 - self._last_prune > PRUNE_EVERY_S:
            self._last_prune = now_ms / 1000
            self.sessions.prune(now_ms)

    def _internal(self, error: Exception) -> Rejected:
        """A bug met on one event: dead-lettered and logged without the value that caused it (its type, a
        redacted message and where), so its batch still goes through."""
        log_unexpected(log, "capture failed on one event", error, self._scrub)
        return _internal_rejection(error)


def capture_subjects(config: LiverlConfig) -> CaptureSubjects:
    from liverl.privacy import key_store
    from liverl.privacy.pseudonyms import Pseudonyms

    store = key_store(config)
    return CaptureSubjects(store, Pseudonyms(store, config.privacy.key_cache_size), config.privacy.key_cache_size,
                           make_keys=config.privacy.encrypt_payloads)


def _internal_rejection(error: Exception) -> Rejected:
    return Rejected("internal_error", f"the service failed on this event ({type(error).__name__}); it was "
                                      "dead-lettered for inspection, do not resend it unchanged")


def _rpc_error(error: Exception) -> str:
    code = getattr(error, "code", None)
    return code().name if callable(code) else type(error).__name__
