"""The kernel's out-of-memory killer, for real: a job's runner in a memory cgroup of its own with
a small limit, a job that allocates past it. The kernel kills the job (SIGKILL), the runner reads
the cgroup's ``oom_kill`` count rise, and the controller calls it host memory; a SIGKILL the
kernel did not record is a kill. Creating a cgroup needs the right to (root, or a delegated
cgroup); without it the test is skipped, saying so."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from akka_training.backends.local.backend import LocalBackend
from akka_training.controller.classify import classify_exit
from akka_training.core.failures import FailureReason

pytestmark = pytest.mark.slow

LIMIT = 256 * 2**20
HOG = "chunks = []\nwhile True:\n    chunks.append(bytearray(16 * 2**20))\n"


@pytest.fixture
def memory_cgroup() -> Iterator[Path]:
    """A new memory cgroup limited to LIMIT bytes (v1 or v2)."""
    v1 = Path("/sys/fs/cgroup/memory")
    name = f"akka-test-{uuid.uuid4().hex[:8]}"
    group = v1 / name if v1.is_dir() else Path("/sys/fs/cgroup") / name
    try:
        group.mkdir()
        if v1.is_dir():
            (group / "memory.limit_in_bytes").write_text(str(LIMIT))
            swap = group / "memory.memsw.limit_in_bytes"
            if swap.exists():
                swap.write_text(str(LIMIT))
        else:
            (group / "memory.max").write_text(str(LIMIT))
            (group / "memory.swap.max").write_text("0")
    except OSError as exc:
        if group.exists():
            group.rmdir()
        pytest.skip(f"a memory cgroup cannot be created here: {exc}")
    yield group
    for pid in (group / "cgroup.procs").read_text().split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except ProcessLookupError:
            pass
    group.rmdir()


def run_runner(job_dir: Path, code: str, cgroup: Path | None) -> dict[str, object]:
    job_dir.mkdir(parents=True)
    launch = {"argv": [sys.executable, "-c", code], "env": {}, "grace_seconds": 5}
    (job_dir / "launch.json").write_text(json.dumps(launch))

    def enter() -> None:
        if cgroup is not None:
            (cgroup / "cgroup.procs").write_text(str(os.getpid()))

    subprocess.run(
        [sys.executable, "-m", "akka_training.backends.local.runner", str(job_dir)],
        preexec_fn=enter,
        timeout=120,
        check=True,
        cwd=job_dir,
    )
    return dict(json.loads((job_dir / "exit.json").read_text()))


def test_a_job_the_kernel_kills_for_memory_is_host_oom(tmp_path: Path, memory_cgroup: Path) -> None:
    result = run_runner(tmp_path / "jobs" / "r" / "1", HOG, memory_cgroup)
    assert result["signal"] == signal.SIGKILL
    assert result["oom_killed"] is True

    backend = LocalBackend(tmp_path / "jobs", {"default": 1})
    handle = {"pid": 1, "created": 0.0, "dir": str(tmp_path / "jobs" / "r" / "1")}
    status = backend.status(handle)
    reason, detail = classify_exit(status, "")
    assert reason == FailureReason.HOST_OOM
    assert detail.startswith("the kernel's out-of-memory killer ended the job (SIGKILL")


def test_a_sigkill_the_kernel_did_not_record_is_a_kill(tmp_path: Path) -> None:
    code = "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n"
    result = run_runner(tmp_path / "jobs" / "r" / "1", code, None)
    assert result["signal"] == signal.SIGKILL
    assert result["oom_killed"] is False
    backend = LocalBackend(tmp_path / "jobs", {"default": 1})
    handle = {"pid": 1, "created": 0.0, "dir": str(tmp_path / "jobs" / "r" / "1")}
    reason, detail = classify_exit(backend.status(handle), "")
    assert reason == FailureReason.JOB_KILLED
    assert "the kernel recorded no out-of-memory kill" in detail
