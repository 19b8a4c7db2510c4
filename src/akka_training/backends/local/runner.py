"""`python -m akka_training.backends.local.runner JOB_DIR`: the parent of one local job.

It starts the job described by ``JOB_DIR/launch.json`` (removed once read: it holds the job's
token), forwards a stop (SIGTERM) to it and kills it after the grace period. When the job has
exited it ends every process the job started that is still alive (`family`: they carry the job's
mark in their environment, also those in sessions of their own), empties the directory of what is
stored elsewhere (`jobfiles`: the log stays), and only then writes ``JOB_DIR/exit.json``, so that
the job counts as gone, and its
devices free, once nothing of it runs. ``exit.json`` survives a restart of the service that
launched the job; it also says whether the kernel's out-of-memory killer acted in the job's
cgroup while it ran. It imports nothing heavy.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import threading
from pathlib import Path

from akka_training.backends.jobfiles import remove_stored_elsewhere
from akka_training.backends.local.family import (
    FAMILY_ENV,
    end_family,
    oom_kills,
)


def main(job_dir: Path) -> int:
    # The hand-off holds the job's token: read once, then gone from the disk.
    launch_file = job_dir / "launch.json"
    launch = json.loads(launch_file.read_text())
    launch_file.unlink()
    limit = launch.get("host_memory_bytes")

    def _limits() -> None:
        if limit:
            # The job's private memory may not pass its envelope's host memory: an allocation
            # past it fails inside the job, which reports host out-of-memory.
            resource.setrlimit(resource.RLIMIT_DATA, (int(limit), int(limit)))

    env = dict(os.environ)
    env.update(launch.get("env", {}))
    mark = str(job_dir)
    env[FAMILY_ENV] = mark
    ooms_before = oom_kills()
    child = subprocess.Popen(launch["argv"], cwd=job_dir, env=env, preexec_fn=_limits)
    grace = float(launch.get("grace_seconds", 20))
    stopping = threading.Event()

    def _stop(_signum: int, _frame: object) -> None:
        if stopping.is_set():
            return
        stopping.set()
        try:
            child.send_signal(signal.SIGTERM)
        except ProcessLookupError:
            return
        timer = threading.Timer(grace, _kill)
        timer.daemon = True
        timer.start()

    def _kill() -> None:
        if child.poll() is None:
            child.kill()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    code = child.wait()
    ooms_after = oom_kills()
    # What the job left running (verl's Ray processes, a killed job's children): ended before
    # the job is reported gone.
    left = end_family(mark, min(grace, 10.0))
    # Its checkpoints, copies and half-written files are stored elsewhere or useless now.
    remove_stored_elsewhere(job_dir)
    result = {
        "exit_code": code if code >= 0 else None,
        "signal": -code if code < 0 else None,
        "stopped": stopping.is_set(),
        "oom_killed": (
            ooms_before is not None and ooms_after is not None and ooms_after > ooms_before
        ),
        "left_running": left,
    }
    tmp = job_dir / "exit.json.part"
    tmp.write_text(json.dumps(result))
    os.replace(tmp, job_dir / "exit.json")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
