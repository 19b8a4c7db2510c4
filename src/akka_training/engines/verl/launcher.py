"""verl as a child process of the training job.

`VerlProcess` starts ``python -m verl.trainer.main_ppo <overrides>`` with the interpreter of
verl's own environment, in a process group of its own (so a stop reaches every process verl
started: its Ray head, its workers, vLLM), with stdout and stderr appended to the job's log. It
follows verl's metrics file (`metrics.MetricsTail`) and reports, through `events`, the steps
that completed, a stall (no new step for a while) and the exit.

Every process verl starts carries `FAMILY_ENV` in its environment (Ray passes its driver's
environment on to the raylet and the workers), so the whole tree is found even where a process
left verl's session and was reparented to init. `stop` ends that tree on every exit path: after
a normal exit it reaps what outlived verl (a raylet or a worker in a session of its own), and
while verl runs it sends SIGTERM to the group and to every member, waits `grace` seconds, then
sends SIGKILL to what is left. verl's main process also gets SIGKILL when the job's process dies
(``PR_SET_PDEATHSIG`` on Linux), and `reap_leftovers` ends what an earlier attempt of the same run
left on the node, by the run's part of the same variable.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

from akka_training.engines.verl.metrics import MetricsTail, VerlStep

MAIN_MODULE = "verl.trainer.main_ppo"
# "<run>/<attempt>/<unique>" in the environment of every process of one run of verl.
FAMILY_ENV = "AKKA_VERL_FAMILY"
_PR_SET_PDEATHSIG = 1
# Looked up before any fork: the child between fork and exec only calls it.
_PRCTL = getattr(ctypes.CDLL(None), "prctl", None) if sys.platform.startswith("linux") else None


@dataclass(frozen=True)
class Steps:
    """Steps verl completed since the previous event."""

    steps: list[VerlStep]


@dataclass(frozen=True)
class Stalled:
    """No new step for `seconds` (reported once per stall)."""

    seconds: float
    last_step: int | None


@dataclass(frozen=True)
class Exited:
    returncode: int


@dataclass(frozen=True)
class Tick:
    """Nothing new this poll: a chance for the caller to look at its own state."""


Event = Steps | Stalled | Exited | Tick


def main_ppo_command(python: Path, overrides: Sequence[str]) -> list[str]:
    return [str(python), "-m", MAIN_MODULE, *overrides]


class VerlProcess:
    """One run of verl (or of a stand-in with the same files and exit codes)."""

    def __init__(
        self,
        command: Sequence[str],
        *,
        metrics_file: Path,
        log_file: Path,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        family: str | None = None,
    ) -> None:
        self.command = list(command)
        self.metrics = MetricsTail(metrics_file)
        self.log_file = log_file
        # `family`: "<run>/<attempt>", so that a later attempt can find what this one left.
        self.family = f"{family or 'verl'}/{uuid.uuid4().hex}"
        self.env = {**os.environ, **(env or {}), FAMILY_ENV: self.family}
        self.cwd = cwd
        self._process: subprocess.Popen[bytes] | None = None
        self._last_progress = 0.0
        self._last_step: int | None = None
        self._stall_reported = False
        # verl's descendants as last seen: Ray processes started in sessions of their own are
        # reparented when verl exits, and are found through this list.
        self._family: dict[int, psutil.Process] = {}

    # --- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_file, "ab") as log:
            self._process = subprocess.Popen(
                self.command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                cwd=self.cwd,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        self._last_progress = time.monotonic()

    @property
    def pid(self) -> int:
        if self._process is None:
            raise RuntimeError("verl was not started")
        return self._process.pid

    @property
    def returncode(self) -> int | None:
        return None if self._process is None else self._process.poll()

    def events(
        self,
        *,
        poll_seconds: float = 1.0,
        stall_seconds: float = 600.0,
        startup_seconds: float = 1800.0,
    ) -> Iterator[Event]:
        """Follow verl until it exits, one event per poll at least (`Tick` when nothing
        happened). Before the first step the stall window is `startup_seconds` (loading the
        model and starting vLLM take a while); after it, `stall_seconds`. The caller may `stop`
        between events; the iterator then ends with the exit."""
        while True:
            self._remember_family()
            steps = self.metrics.new_steps()
            if steps:
                self._last_progress = time.monotonic()
                self._last_step = steps[-1].step
                self._stall_reported = False
                yield Steps(steps)
            code = self.returncode
            if code is not None:
                tail = self.metrics.new_steps()  # lines written just before the exit
                if tail:
                    yield Steps(tail)
                yield Exited(code)
                return
            window = stall_seconds if self._last_step is not None else startup_seconds
            idle = time.monotonic() - self._last_progress
            if idle > window and not self._stall_reported:
                self._stall_reported = True
                yield Stalled(seconds=idle, last_step=self._last_step)
            elif not steps:
                yield Tick()
            time.sleep(poll_seconds)

    def stop(self, grace: float = 30.0) -> int:
        """End verl and every process it started; returns verl's exit status (negative: the
        signal that ended it). After verl exited on its own this reaps what outlived it;
        before, SIGTERM to verl's group and every member, SIGKILL after `grace` seconds."""
        if self._process is None:
            raise RuntimeError("verl was not started")
        self._remember_family()
        if self._process.poll() is None:
            family = self._members()
            self._signal_all(signal.SIGTERM, family)
            try:
                self._process.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                self._signal_all(signal.SIGKILL, self._members())
                self._process.wait()
        _end_all(self._members(), grace)
        return self._process.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self._process is None:
            raise RuntimeError("verl was not started")
        return self._process.wait(timeout=timeout)

    # --- helpers ------------------------------------------------------------------------------

    def _remember_family(self) -> None:
        if self.returncode is not None:
            return  # verl's pid is no longer its own
        with contextlib.suppress(psutil.Error):
            for child in psutil.Process(self.pid).children(recursive=True):
                self._family.setdefault(child.pid, child)

    def _members(self) -> list[psutil.Process]:
        """verl's descendants: those seen while it ran, and every live process that carries
        this run of verl's `FAMILY_ENV` (found also once reparented)."""
        members = {p.pid: p for p in self._family.values() if _alive(p)}
        for process in marked_processes(lambda value: value == self.family):
            members.setdefault(process.pid, process)
        members.pop(os.getpid(), None)
        return list(members.values())

    def _signal_all(self, signum: int, family: list[psutil.Process]) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signum)
        for process in family:
            with contextlib.suppress(psutil.Error):
                process.send_signal(signum)


def marked_processes(match: Callable[[str], bool]) -> list[psutil.Process]:
    """Live processes of this user whose `FAMILY_ENV` value satisfies `match`."""
    found = []
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            value = process.environ().get(FAMILY_ENV)
            if value is not None and match(value) and _alive(process):
                found.append(process)
    return found


def reap_leftovers(run_id: str, grace: float = 10.0) -> int:
    """End the processes an earlier attempt of `run_id` left on this node (a job killed before
    it could stop verl); returns how many there were."""
    prefix = f"{run_id}/"
    leftovers = [
        p for p in marked_processes(lambda v: v.startswith(prefix)) if p.pid != os.getpid()
    ]
    _end_all(leftovers, grace)
    return len(leftovers)


def _end_all(processes: list[psutil.Process], grace: float) -> None:
    """SIGTERM, then SIGKILL after `grace` seconds, to every process still alive."""
    survivors = [p for p in processes if _alive(p)]
    if not survivors:
        return
    for process in survivors:
        with contextlib.suppress(psutil.Error):
            process.terminate()
    _, alive = psutil.wait_procs(survivors, timeout=grace)
    for process in alive:
        with contextlib.suppress(psutil.Error):
            process.kill()
    psutil.wait_procs(alive, timeout=grace)


def _die_with_parent() -> None:
    """In verl's main process before it starts: SIGKILL when the job's process dies."""
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, int(signal.SIGKILL))


def _alive(process: psutil.Process) -> bool:
    with contextlib.suppress(psutil.Error):
        return bool(process.is_running() and process.status() != psutil.STATUS_ZOMBIE)
    return False
