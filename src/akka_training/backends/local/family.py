"""Every process a local job started, found by a mark in its environment.

The runner puts ``FAMILY_ENV=<job directory>`` in the job's environment; every process the job
starts inherits it (verl, its Ray head and workers, vLLM), also those that leave the job's
session and are reparented to init, where the process tree no longer finds them. Ending a job
ends every live process carrying its mark, and the job counts as gone (its devices free) only
once none is left. A process that clears its own environment escapes the mark: none of the
engines' does.

It also reads whether the kernel's out-of-memory killer acted in the job's cgroup (cgroup v2
``memory.events``), so that a SIGKILL is called an out-of-memory kill only when it was one.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import psutil

FAMILY_ENV = "AKKA_JOB_FAMILY"
CGROUP_ROOT = Path("/sys/fs/cgroup")


def members(mark: str) -> list[psutil.Process]:
    """Live processes of this user carrying `mark`, this process excepted."""
    found = []
    me = os.getpid()
    for process in psutil.process_iter():
        if process.pid == me:
            continue
        with contextlib.suppress(psutil.Error):
            if process.environ().get(FAMILY_ENV) == mark and _alive(process):
                found.append(process)
    return found


def end_family(mark: str, grace: float) -> int:
    """SIGTERM to every process carrying `mark`, SIGKILL after `grace` seconds to those left,
    and wait until they are gone; how many there were."""
    survivors = members(mark)
    if not survivors:
        return 0
    for process in survivors:
        with contextlib.suppress(psutil.Error):
            process.terminate()
    _, alive = psutil.wait_procs(survivors, timeout=grace)
    for process in alive + members(mark):
        with contextlib.suppress(psutil.Error):
            process.kill()
    psutil.wait_procs(alive, timeout=10)
    return len(survivors)


def oom_kills(pid: int | None = None) -> int | None:
    """The ``oom_kill`` count of the memory cgroup of `pid` (default: this process): cgroup v2's
    ``memory.events``, or v1's ``memory.oom_control``; None where neither can be read."""
    try:
        lines = Path(f"/proc/{pid or 'self'}/cgroup").read_text().splitlines()
    except OSError:
        return None
    candidates: list[Path] = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        parts = [part for part in path.split("/") if part]
        # A container sees its own cgroup as the mount's root, while /proc names the whole
        # path: the deepest suffix of the path that exists under the mount is the job's.
        suffixes = [parts[i:] for i in range(len(parts) + 1)]
        if controllers == "":
            candidates += [CGROUP_ROOT.joinpath(*rest, "memory.events") for rest in suffixes]
        elif "memory" in controllers.split(","):
            candidates += [
                CGROUP_ROOT.joinpath("memory", *rest, "memory.oom_control") for rest in suffixes
            ]
    for events in candidates:
        with contextlib.suppress(OSError, ValueError):
            for entry in events.read_text().splitlines():
                name, _, value = entry.partition(" ")
                if name == "oom_kill":
                    return int(value)
    return None


def _alive(process: psutil.Process) -> bool:
    with contextlib.suppress(psutil.Error):
        return bool(process.is_running() and process.status() != psutil.STATUS_ZOMBIE)
    return False
