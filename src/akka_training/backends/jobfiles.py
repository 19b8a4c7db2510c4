"""What an attempt leaves in its working directory, and when it goes.

A job works in a directory of its own (``$AKKA_HOME/jobs/RUN/ATTEMPT`` on the local backend,
``$TMPDIR/akka-jobs/RUN/ATTEMPT`` on a Ray node): its spec, the base model's and the datasets'
copies, the trainer's checkpoints with their optimizer state, the resume copy of a snapshot.
All of it is stored elsewhere (snapshots and rollouts in the blob store, figures in the
database) once the attempt ends, and on a real model it is gigabytes an attempt. What stays is
the local backend's log, its exit record and its handle (`KEPT`), for `runs logs` and for the
service to read how the job ended; `sweep` removes those too once they are older than the
deployment keeps job logs.

The backend that started a job marks its directory (`MARK`): only a marked directory is ever
emptied, so a job started by hand in a directory of the user's own removes nothing. The mark is
also the job's liveness lock on a Ray node: the bootstrap holds an exclusive `flock` on it for
the life of the job (the lock passes through ``exec`` to the job), so the next job on that node
can tell a directory whose job is gone (killed, its node restarted) from one still in use.

Standard library only: the Ray bootstrap and the jobs import it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

MARK = ".akka-job"
# The local backend's log, exit record and handle: read after the job ends.
KEPT = frozenset({"job.log", "exit.json", "handle.json", MARK})


def mark(job_dir: Path) -> None:
    """Say that `job_dir` is a job's working directory, which may be emptied once it ends."""
    job_dir.mkdir(parents=True, exist_ok=True)
    (job_dir / MARK).touch()


def hold(job_dir: Path) -> int:
    """Mark `job_dir` and hold its lock for as long as this process (or what it `exec`s)
    lives; the lock's file descriptor, inherited across ``exec``."""
    job_dir.mkdir(parents=True, exist_ok=True)
    # Locked before it takes the mark's name, so that no sweep ever sees the mark unlocked
    # while its job lives.
    draft = job_dir / f"{MARK}.{os.getpid()}"
    fd = os.open(draft, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.replace(draft, job_dir / MARK)
    os.set_inheritable(fd, True)
    return fd


def held(job_dir: Path) -> bool:
    """Whether a live process holds `job_dir`'s lock (its job still runs)."""
    try:
        fd = os.open(job_dir / MARK, os.O_RDWR)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing releases a lock taken here
    return False


def remove_stored_elsewhere(job_dir: Path) -> None:
    """Empty an ended job's directory of everything but `KEPT`. A directory without the mark
    is left as it is."""
    if not (job_dir / MARK).is_file():
        return
    for entry in job_dir.iterdir():
        if entry.name in KEPT:
            continue
        with contextlib.suppress(FileNotFoundError):
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink()


def sweep(
    root: Path,
    running: Callable[[Path], bool],
    *,
    keep_logs_seconds: float,
    now: Callable[[], float] = time.time,
) -> int:
    """Tidy `root`'s ``RUN/ATTEMPT`` directories whose job no longer runs (`running` says which
    do): what is stored elsewhere goes; the whole directory goes once nothing in it changed for
    `keep_logs_seconds`. Returns how many directories were removed entirely."""
    removed = 0
    if not root.is_dir():
        return 0
    for run_dir in root.iterdir():
        if not run_dir.is_dir():
            continue
        for job_dir in run_dir.iterdir():
            if not (job_dir / MARK).is_file() or running(job_dir):
                continue
            remove_stored_elsewhere(job_dir)
            if now() - _last_change(job_dir) >= keep_logs_seconds:
                shutil.rmtree(job_dir, ignore_errors=True)
                removed += 1
        with contextlib.suppress(OSError):
            run_dir.rmdir()  # only when empty
    return removed


def _last_change(job_dir: Path) -> float:
    """When the job last wrote what stays (its log, its exit record); emptying the directory
    does not count."""
    times = [p.stat().st_mtime for p in job_dir.iterdir() if p.is_file()]
    return max(times, default=job_dir.stat().st_mtime)
