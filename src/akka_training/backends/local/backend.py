"""Jobs as child processes on this host.

Each attempt gets a directory ``$AKKA_HOME/jobs/RUN/ATTEMPT`` holding its spec, its log and, once
it ends, ``exit.json`` (written by the runner). Once the job ends only the log, the exit record
and the handle stay (`jobfiles`), for ``keep_logs_seconds``; a starting backend tidies what
ended jobs left while it was down. A handle is the runner's pid and start time, so a
restarted service finds its jobs again and never mistakes a reused pid for one of them.

A job is gone only once every process it started is gone (`family`): the runner ends what the job
left before it writes ``exit.json``, and where the runner itself was killed, `status` ends the
job's processes (found by their mark) before it answers that the job exited.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from akka_training.backends import jobfiles
from akka_training.backends.base import (
    Backend,
    JobStatus,
    LaunchRefused,
    LaunchRequest,
    ObservedPool,
)
from akka_training.backends.local import family


class LocalBackend(Backend):
    name = "local"

    def __init__(
        self,
        jobs_dir: Path,
        pools: dict[str, int],
        *,
        accelerator: str = "cpu",
        grace_seconds: float = 20.0,
        python: str | None = None,
        keep_logs_seconds: float = 14 * 86400.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.jobs_dir = jobs_dir
        self.jobs_dir.mkdir(parents=True, exist_ok=True)
        self._pools = pools  # devices this host offers to each pool
        self._accelerator = accelerator
        self._grace = grace_seconds
        self._python = python or sys.executable
        self._children: dict[int, subprocess.Popen[bytes]] = {}
        self._lock = threading.Lock()
        # What ended jobs left while this service was down (a killed runner, a crash).
        jobfiles.sweep(jobs_dir, self._running, keep_logs_seconds=keep_logs_seconds, now=clock)

    def job_dir(self, run_id: str, attempt: int) -> Path:
        return self.jobs_dir / run_id / str(attempt)

    def launch(self, request: LaunchRequest) -> dict[str, Any]:
        job_dir = self.job_dir(request.run_id, request.attempt)
        handle_file = job_dir / "handle.json"
        if handle_file.exists():
            launched: dict[str, Any] = json.loads(handle_file.read_text())
            return launched
        jobfiles.mark(job_dir)
        (job_dir / "job.json").write_text(json.dumps(request.job_spec, indent=1))
        env = dict(request.env)
        if self._accelerator == "cpu":
            env["CUDA_VISIBLE_DEVICES"] = ""
        else:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in request.device_ids)
        launch = {
            "argv": [self._python, "-m", request.entry_module, str(job_dir / "job.json")],
            "env": env,
            "host_memory_bytes": request.host_memory_bytes,
            "grace_seconds": self._grace,
        }
        (job_dir / "launch.json").write_text(json.dumps(launch))
        os.chmod(job_dir / "launch.json", 0o600)  # it holds the job's token
        try:
            with open(job_dir / "job.log", "ab") as log:
                proc = subprocess.Popen(
                    [self._python, "-m", "akka_training.backends.local.runner", str(job_dir)],
                    cwd=job_dir,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                )
        except OSError as exc:
            raise LaunchRefused(f"could not start {self._python}: {exc}") from exc
        with self._lock:
            self._children[proc.pid] = proc
        handle = {
            "pid": proc.pid,
            "created": psutil.Process(proc.pid).create_time(),
            "dir": str(job_dir),
        }
        tmp = job_dir / "handle.json.part"
        tmp.write_text(json.dumps(handle))
        os.replace(tmp, handle_file)
        return handle

    def status(self, handle: dict[str, Any]) -> JobStatus:
        job_dir = Path(handle["dir"])
        self._reap(handle["pid"])
        exit_file = job_dir / "exit.json"
        if exit_file.exists():
            result = json.loads(exit_file.read_text())
            return JobStatus(
                "exited",
                result.get("exit_code"),
                result.get("signal"),
                oom_killed=bool(result.get("oom_killed")),
            )
        if self._alive(handle):
            return JobStatus("running")
        if exit_file.exists():  # the runner wrote it as it ended
            return self.status(handle)
        # The runner itself is gone without a word (killed): what it started may still run,
        # the job among them. They end now, so that the job is gone before its devices are.
        left = family.end_family(str(job_dir), 2.0)
        jobfiles.remove_stored_elsewhere(job_dir)
        detail = "the job's runner process was killed"
        if left:
            detail += f"; {left} of the job's processes were still running and were ended"
        return JobStatus("exited", None, signal.SIGKILL, detail=detail)

    def stop(self, handle: dict[str, Any], grace_seconds: float) -> None:
        if not self._alive(handle):
            return
        try:
            os.kill(handle["pid"], signal.SIGTERM)
        except ProcessLookupError:
            return
        # The runner kills the job after its grace period; this is the backstop in case the
        # runner itself does not answer.
        timer = threading.Timer(grace_seconds + 10, self._kill_group, args=(handle,))
        timer.daemon = True
        timer.start()

    def logs(self, handle: dict[str, Any], offset: int = 0) -> tuple[str, int]:
        path = Path(handle["dir"]) / "job.log"
        if not path.exists():
            return "", offset
        with open(path, "rb") as f:
            size = f.seek(0, 2)
            start = max(0, size + offset) if offset < 0 else min(offset, size)
            f.seek(start)
            data = f.read()
        return data.decode("utf-8", errors="replace"), start + len(data)

    def observe(self) -> dict[str, ObservedPool]:
        return {
            name: ObservedPool(devices=count, accelerator=self._accelerator)
            for name, count in self._pools.items()
        }

    def sees_path(self, path: str) -> bool | None:
        # Jobs run on this host: they read what this process reads. A model in object storage
        # is the job's to download.
        if path.startswith("s3://"):
            return None
        return Path(path).exists()

    def _running(self, job_dir: Path) -> bool:
        """Whether the job of `job_dir` may still run: its runner lives, or it has no handle
        yet and no exit record (a launch under way)."""
        if (job_dir / "exit.json").exists():
            return False
        try:
            handle = json.loads((job_dir / "handle.json").read_text())
        except (OSError, ValueError):
            return False
        return self._alive(handle)

    def _alive(self, handle: dict[str, Any]) -> bool:
        try:
            proc = psutil.Process(handle["pid"])
            if abs(proc.create_time() - float(handle["created"])) > 1.0:
                return False
            return bool(proc.status() != psutil.STATUS_ZOMBIE)
        except psutil.NoSuchProcess:
            return False

    def end_jobs(self) -> None:
        """End every job this backend started and wait for its runner (a test's trainer at its
        end; a service's `close` leaves its jobs running)."""
        with self._lock:
            children = list(self._children.values())
            self._children.clear()
        for proc in children:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            proc.wait()

    def _reap(self, pid: int) -> None:
        with self._lock:
            proc = self._children.get(pid)
            if proc is not None and proc.poll() is not None:
                del self._children[pid]

    def _kill_group(self, handle: dict[str, Any]) -> None:
        if self._alive(handle):
            try:
                os.killpg(handle["pid"], signal.SIGKILL)
            except ProcessLookupError:
                pass
            family.end_family(handle["dir"], 0.0)
