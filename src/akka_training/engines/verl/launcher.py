"""verl as a child process of the training job.

`VerlProcess` starts ``python -m verl.trainer.main_ppo <overrides>`` with the interpreter of
verl's own environment, in a process group of its own (so a stop reaches every process verl
started: its Ray head, its workers, vLLM), with stdout and stderr appended to the job's log. It
follows verl's metrics file (`metrics.MetricsTail`) and reports, through `events`, the steps
that completed, a stall (no new step for a while) and the exit.

Stopping sends SIGTERM to the group and to every descendant (Ray starts some of its processes in
sessions of their own), waits `grace` seconds, then sends SIGKILL to what is left.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

from akka_training.engines.verl.metrics import MetricsTail, VerlStep

MAIN_MODULE = "verl.trainer.main_ppo"


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
    ) -> None:
        self.command = list(command)
        self.metrics = MetricsTail(metrics_file)
        self.log_file = log_file
        self.env = {**os.environ, **(env or {})}
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
        """SIGTERM to verl's process group and descendants, SIGKILL after `grace` seconds;
        returns the exit status (negative: the signal that ended it)."""
        if self._process is None:
            raise RuntimeError("verl was not started")
        if self._process.poll() is not None:
            self._reap_descendants(grace, list(self._family.values()))
            return self._process.returncode
        self._remember_family()
        family = list(self._family.values())
        self._signal_all(signal.SIGTERM, family)
        try:
            self._process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            self._signal_all(signal.SIGKILL, family)
            self._process.wait()
        self._reap_descendants(grace, family)
        return self._process.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self._process is None:
            raise RuntimeError("verl was not started")
        return self._process.wait(timeout=timeout)

    # --- helpers ------------------------------------------------------------------------------

    def _remember_family(self) -> None:
        with contextlib.suppress(psutil.Error):
            for child in psutil.Process(self.pid).children(recursive=True):
                self._family.setdefault(child.pid, child)

    def _signal_all(self, signum: int, family: list[psutil.Process]) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signum)
        for process in family:
            with contextlib.suppress(psutil.Error):
                process.send_signal(signum)

    def _reap_descendants(self, grace: float, family: list[psutil.Process]) -> None:
        """Processes verl started that outlived it (a Ray raylet in its own session, say)."""
        survivors = [p for p in family if _alive(p)]
        if not survivors:
            return
        for process in survivors:
            with contextlib.suppress(psutil.Error):
                process.terminate()
        _, alive = psutil.wait_procs(survivors, timeout=grace)
        for process in alive:
            with contextlib.suppress(psutil.Error):
                process.kill()


def _alive(process: psutil.Process) -> bool:
    with contextlib.suppress(psutil.Error):
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    return False
