"""Time-bounded symbolic comparison for the ``match`` term's ``math`` mode.

math-verify (and the sympy under it) runs in worker processes (`math_worker.py`, which says how
answers are read and compared) because a thread stuck in sympy cannot be stopped: a comparison
that outlives `timeout_seconds` kills its worker, which is replaced on the next call, and fails
with cause ``timeout``. Workers start on first use (importing math-verify and sympy takes about
a second) and stay up until `close()`; a finalizer kills any that remain at exit.
"""

from __future__ import annotations

import json
import os
import queue
import select
import subprocess
import sys
import threading
import time
import weakref
from pathlib import Path

from akka_training.rewards.inputs import FailureCause, TermFailed

WORKER_SCRIPT = Path(__file__).with_name("math_worker.py")
# Longest accepted final answer; longer ones are compared as strings only.
MAX_ANSWER_CHARS = 1000


class MathChecker:
    """A small pool of symbolic-comparison workers, safe to share between threads."""

    def __init__(
        self,
        *,
        processes: int = 2,
        timeout_seconds: float = 3.0,
        start_timeout_seconds: float = 60.0,
    ) -> None:
        self.timeout_seconds = timeout_seconds
        self.start_timeout_seconds = start_timeout_seconds
        self._slots: queue.Queue[_Worker | None] = queue.Queue()
        for _ in range(max(1, processes)):
            self._slots.put(None)  # started on first use
        self._live: set[_Worker] = set()
        self._lock = threading.Lock()
        # Kills what is left at interpreter exit or when the checker is collected.
        weakref.finalize(self, _kill_all, self._live, self._lock)

    def equivalent(self, answer: str, expected: str) -> bool:
        """Whether the final `answer` is the `expected` one as a mathematical object. An answer
        that cannot be read is not equal to anything. Raises `TermFailed` (``timeout``) when
        the check outlives the time limit, (``error``) when a worker cannot be started or
        dies."""
        if len(answer) > MAX_ANSWER_CHARS or len(expected) > MAX_ANSWER_CHARS:
            return False
        try:
            worker = self._slots.get(timeout=self.start_timeout_seconds + self.timeout_seconds)
        except queue.Empty:
            raise TermFailed(
                FailureCause.TIMEOUT, "no symbolic-comparison worker became free in time"
            ) from None
        try:
            if worker is None or not worker.alive():
                worker = self._start()
            reply = worker.ask({"answer": answer, "expected": expected}, self.timeout_seconds)
        except _WorkerTimeout:
            self._discard(worker)
            worker = None
            raise TermFailed(
                FailureCause.TIMEOUT,
                f"the symbolic comparison took longer than {self.timeout_seconds:g} s",
            ) from None
        except _WorkerGone as exc:
            self._discard(worker)
            worker = None
            raise TermFailed(FailureCause.ERROR, str(exc)) from None
        finally:
            self._release(worker)
        return bool(reply.get("equal", False))

    def close(self) -> None:
        """Stop every worker (a comparison in flight fails with ``error``); a later call
        starts new ones."""
        _kill_all(self._live, self._lock)

    def _start(self) -> _Worker:
        worker = _Worker.start(self.start_timeout_seconds)
        with self._lock:
            self._live.add(worker)
        return worker

    def _discard(self, worker: _Worker | None) -> None:
        if worker is None:
            return
        worker.kill()
        with self._lock:
            self._live.discard(worker)

    def _release(self, worker: _Worker | None) -> None:
        self._slots.put(worker)


class _WorkerTimeout(Exception):
    pass


class _WorkerGone(Exception):
    pass


class _Worker:
    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self._buffer = b""

    @classmethod
    def start(cls, start_timeout: float) -> _Worker:
        # -I: the worker ignores PYTHON* variables and the user's site directory; it imports
        # only the standard library and math-verify (with sympy).
        proc = subprocess.Popen(
            [sys.executable, "-I", "-u", str(WORKER_SCRIPT)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        worker = cls(proc)
        try:
            ready = worker._read(time.monotonic() + start_timeout)
        except (_WorkerTimeout, _WorkerGone):
            worker.kill()
            raise _WorkerGone(
                "the symbolic-comparison worker did not start (is math-verify installed in "
                "the job's environment?)"
            ) from None
        if not ready.get("ready"):
            worker.kill()
            raise _WorkerGone("the symbolic-comparison worker answered an unexpected greeting")
        return worker

    def alive(self) -> bool:
        return self.proc.poll() is None

    def ask(self, request: dict[str, str], timeout: float) -> dict[str, object]:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps(request).encode() + b"\n")
            self.proc.stdin.flush()
        except OSError:
            raise _WorkerGone("the symbolic-comparison worker stopped unexpectedly") from None
        return self._read(time.monotonic() + timeout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass

    def _read(self, deadline: float) -> dict[str, object]:
        assert self.proc.stdout is not None
        try:
            fd = self.proc.stdout.fileno()
        except ValueError:
            raise _WorkerGone("the symbolic-comparison worker was stopped") from None
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise _WorkerTimeout()
            try:
                ready, _, _ = select.select([fd], [], [], remaining)
                if not ready:
                    raise _WorkerTimeout()
                chunk = os.read(fd, 1 << 16)
            except (OSError, ValueError):  # closed by close() from another thread
                raise _WorkerGone("the symbolic-comparison worker was stopped") from None
            if not chunk:
                raise _WorkerGone("the symbolic-comparison worker stopped unexpectedly")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        try:
            reply = json.loads(line)
        except ValueError:
            raise _WorkerGone("the symbolic-comparison worker answered garbled output") from None
        if not isinstance(reply, dict):
            raise _WorkerGone("the symbolic-comparison worker answered garbled output")
        return reply


def _kill_all(workers: set[_Worker], lock: threading.Lock) -> None:
    with lock:
        doomed = list(workers)
        workers.clear()
    for worker in doomed:
        worker.kill()
