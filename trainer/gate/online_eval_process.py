"""Who runs the gate's online evaluator: a process per candidate, or one process for the trainer's life.

    online_evaluator(gate config) -> PerCandidateEvaluator | PersistentEvaluator | None
    evaluator.evaluate(candidate folder, champion folder) -> OnlineEvaluation      (OnlineEvalError: refuse)
    evaluator.close()

trainer.gate.online_eval_mode = "persistent": the command (without {candidate} or {champion}) is started once.
For each candidate the trainer writes one line on its stdin,

    {"id": "<request id>", "candidate": "/path/to/candidate", "champion": "/path/to/champion"}

and reads lines of its stdout until the one whose "id" is the request's: the JSON object a per-candidate
evaluator prints (trainer/gate/online_eval.py) plus that "id". Every answer must echo its request's id: an answer
with another id or none (an extra or late line of an earlier request) is discarded and counted (`discarded`),
never read as this candidate's, and a request whose own answer does not come is a timeout, so a refusal.
The start-up (interpreter, ML libraries, the product's code) is paid once instead of per gate, and the
evaluator may keep what it learned of a policy it has run before (a champion is judged against many times).
Stdin's end is its signal to exit, so it never outlives the trainer.

Fail-closed like the per-candidate mode: a process that cannot start, dies, answers past
online_eval_timeout_s (its own answer, by id) or answers with no or broken JSON raises OnlineEvalError (the gate
refuses); it is then stopped and the next candidate starts a fresh one.
"""

from __future__ import annotations

import collections
import json
import selectors
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

from liverl.config.trainer import GateConfig
from liverl.io import processes
from trainer.gate.online_eval import (
    STDERR_TAIL_CHARS,
    OnlineEvalError,
    OnlineEvaluation,
    evaluate_online,
    parse_evaluation,
)

MAX_ANSWER_BYTES = 16 * 2**20  # an answer line longer than this is not an evaluation: fail instead of buffering


def online_evaluator(gate: GateConfig) -> "PerCandidateEvaluator | PersistentEvaluator | None":
    """The evaluator gate.online_eval_command and online_eval_mode describe; None when none is configured."""
    if not gate.online_eval_command:
        return None
    if gate.online_eval_mode == "persistent":
        return PersistentEvaluator(gate.online_eval_command, gate.online_eval_timeout_s)
    return PerCandidateEvaluator(gate.online_eval_command, gate.online_eval_timeout_s)


class PerCandidateEvaluator:
    """A fresh process per candidate, with the two folders in its argv."""

    def __init__(self, command: Sequence[str], timeout_s: float):
        self.command, self.timeout_s = list(command), timeout_s

    def evaluate(self, candidate: Path, champion: Path) -> OnlineEvaluation:
        return evaluate_online(self.command, candidate, champion, self.timeout_s)

    def close(self) -> None:
        pass


class PersistentEvaluator:
    """One evaluator process, one request line and one answer line per candidate (see the module docstring)."""

    def __init__(self, command: Sequence[str], timeout_s: float):
        self.argv = [sys.executable if i == 0 and arg == "python" else arg for i, arg in enumerate(command)]
        self.timeout_s = timeout_s
        self.started = 0  # processes started so far (a restart after each failure)
        self.discarded = 0  # answers thrown away because their id was not the request's
        self._requests = 0
        self._ids = uuid.uuid4().hex[:12]  # request ids unique to this trainer, whatever process answers them
        self._process: subprocess.Popen | None = None
        self._stderr: collections.deque[str] = collections.deque()
        self._stderr_reader: threading.Thread | None = None
        self._stdout_buffer = b""

    def evaluate(self, candidate: Path, champion: Path) -> OnlineEvaluation:
        process = self._running()
        self._requests += 1
        request_id = f"{self._ids}-{self._requests}"
        request = json.dumps({"id": request_id, "candidate": str(candidate), "champion": str(champion)}) + "\n"
        try:
            process.stdin.write(request.encode())
            process.stdin.flush()
        except OSError as error:  # it died since the last answer
            self._fail(f"took no request ({error})")
        line = self._answer_to(request_id, process, time.monotonic() + self.timeout_s)
        try:
            return parse_evaluation(line)
        except OnlineEvalError as error:
            self._fail(f"answered {line[:200]!r}: {error}")

    def close(self) -> None:
        """End the process: stdin's end asks it to exit; a process that lingers is stopped."""
        process, self._process = self._process, None
        if process is None:
            return
        try:
            process.stdin.close()
            process.wait(timeout=5.0)
        except (OSError, subprocess.TimeoutExpired):
            processes.stop(process.pid, timeout_s=5.0)
            process.wait()

    # ---- the process --------------------------------------------------------------------------------------
    def _running(self) -> subprocess.Popen:
        if self._process is not None and self._process.poll() is None:
            return self._process
        self.close()
        try:
            process = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, bufsize=0, start_new_session=True)
        except OSError as error:
            raise OnlineEvalError(f"cannot start the online evaluator {self.argv}: {error}; check "
                                  "trainer.gate.online_eval_command") from error
        self._process, self._stdout_buffer, self.started = process, b"", self.started + 1
        self._stderr = collections.deque()
        self._stderr_reader = threading.Thread(target=self._keep_stderr_tail, args=(process, self._stderr),
                                               daemon=True, name="online-eval-stderr")
        self._stderr_reader.start()
        return process

    def _keep_stderr_tail(self, process: subprocess.Popen, tail: collections.deque[str]) -> None:
        """Drain stderr (a full pipe would stall the evaluator) and keep its last STDERR_TAIL_CHARS."""
        kept = 0
        for raw in iter(process.stderr.readline, b""):
            line = raw.decode(errors="replace")
            tail.append(line)
            kept += len(line)
            while kept > STDERR_TAIL_CHARS and len(tail) > 1:
                kept -= len(tail.popleft())

    def _answer_to(self, request_id: str, process: subprocess.Popen, deadline: float) -> str:
        """The answer line that carries request_id; other answers are discarded (counted), a broken line fails."""
        discarded_before = self.discarded
        while True:
            line = self._answer(process, deadline, request_id, discarded_before)
            try:
                data = json.loads(line)
            except json.JSONDecodeError as error:
                self._fail(f"answered {line[:200]!r}: not a JSON object ({error})")
            if isinstance(data, dict) and data.get("id") == request_id:
                return line
            self.discarded += 1

    def _answer(self, process: subprocess.Popen, deadline: float, request_id: str, discarded_before: int) -> str:
        """The next stdout line, read without blocking past the deadline."""
        with selectors.DefaultSelector() as selector:
            selector.register(process.stdout, selectors.EVENT_READ)
            while b"\n" not in self._stdout_buffer:
                left = deadline - time.monotonic()
                if left <= 0:
                    discarded = self.discarded - discarded_before
                    why = (f"; it wrote {discarded} answer(s) whose id did not match request {request_id!r} (each "
                           "answer must echo its request's \"id\")") if discarded else ""
                    self._fail(f"ran past trainer.gate.online_eval_timeout_s={self.timeout_s:g} s without answering "
                               f"request {request_id!r} and was stopped{why}")
                if not selector.select(timeout=left):
                    continue
                chunk = process.stdout.read(65536)
                if not chunk:
                    self._fail(f"exited with code {process.wait()} before answering")
                self._stdout_buffer += chunk
                if len(self._stdout_buffer) > MAX_ANSWER_BYTES:
                    self._fail(f"wrote over {MAX_ANSWER_BYTES} bytes without a line end")
        line, _, self._stdout_buffer = self._stdout_buffer.partition(b"\n")
        return line.decode(errors="replace")

    def _fail(self, what: str):
        """Stop the process (the next candidate starts a fresh one) and refuse with its stderr tail."""
        self.close()
        if self._stderr_reader is not None:
            self._stderr_reader.join(timeout=1.0)  # its last lines, written just before it died
        tail = "".join(self._stderr)
        raise OnlineEvalError(f"online evaluator {self.argv} {what}; stderr tail:\n{tail[-STDERR_TAIL_CHARS:]}")
