"""The local backend stops every process a job started before it calls the job gone: a real
runner and a real verl job (`engines.job` with the verl engine) against the verl stand-in
(``tests/engines/verl/fixtures/fake_verl.py``), whose child leaves verl's session as Ray's
raylet does. The job's processes are killed by pid, as an operator or the OOM killer would."""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from akka_training.backends.base import JobStatus, LaunchRequest
from akka_training.backends.local.backend import LocalBackend
from akka_training.blobstore.local import LocalBlobStore
from akka_training.engines.verl.smoke import RecordingService
from akka_training.testing.waiting import until
from tests.engines.verl.conftest import FIXTURES, make_spec

pytestmark = pytest.mark.slow


@pytest.fixture
def service() -> Iterator[RecordingService]:
    s = RecordingService()
    yield s
    s.close()


@pytest.fixture
def backend(tmp_path: Path) -> Iterator[LocalBackend]:
    """The test's backend; at the end it waits for every runner it started, so none is left
    for the garbage collector to find unwaited during a later test."""
    made = LocalBackend(tmp_path / "jobs", {"default": 1}, grace_seconds=5)
    yield made
    made.end_jobs()


def launch_verl_job(
    tmp_path: Path, service: RecordingService, backend: LocalBackend
) -> tuple[dict[str, Any], Path]:
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nexec {sys.executable} {FIXTURES / "fake_verl.py"} "$@"\n')
    python.chmod(0o755)
    blobs = LocalBlobStore(tmp_path / "blobs")
    row = {
        "messages": [
            {"role": "user", "content": "1 + 1?"},
            {"role": "assistant", "content": "#### 2"},
        ]
    }
    blobs.put_bytes("datasets/sha256/aa/train", (json.dumps(row) + "\n").encode() * 16)
    spec = make_spec(
        rows=16,
        model_path=str(FIXTURES / "tokenizer"),
        rl={"promptsPerStep": 2, "generationsPerPrompt": 4, "training": {"maxSteps": 500}},
    ).model_copy(update={"trainer_url": service.url, "storage_url": blobs.url})
    child_file = tmp_path / "child.pid"
    pythonpath = os.environ.get("PYTHONPATH", "")
    handle = backend.launch(
        LaunchRequest(
            run_id=spec.run_id,
            attempt=spec.attempt,
            pool="default",
            devices=1,
            device_ids=[0],
            job_spec=json.loads(spec.model_dump_json(by_alias=True)),
            env={
                "AKKA_JOB_BOOTSTRAP": "token",
                "AKKA_VERL_PYTHON": str(python),
                "FAKE_VERL_STEP_SECONDS": "0.3",
                "FAKE_VERL_CHILD": str(child_file),
                "FAKE_VERL_MODE": "",
                "PYTHONPATH": pythonpath,
            },
        )
    )
    until(
        lambda: service.of("steps") and child_file.exists(),
        what="the job's first step and its child",
        timeout=120,
        interval=0.2,
        detail=lambda: (Path(handle["dir"]) / "job.log").read_text()[-3000:],
    )
    return handle, child_file


def wait_exited(backend: LocalBackend, handle: dict[str, Any], timeout: float) -> JobStatus:
    return until(
        lambda: (status := backend.status(handle)).state == "exited" and status,
        what="the job to exit",
        timeout=timeout,
        interval=0.2,
    )


# What an ended job's directory holds.
ENDED = [".akka-job", "exit.json", "handle.json", "job.log"]
ENDED_WITHOUT_RUNNER = [".akka-job", "handle.json", "job.log"]


def left_in(job_dir: Path) -> list[str]:
    return sorted(str(p.relative_to(job_dir)) for p in job_dir.rglob("*"))


def gone(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True


def job_pid(handle: dict[str, Any]) -> int:
    runner = psutil.Process(handle["pid"])
    pid: int = runner.children()[0].pid
    return pid


@pytest.mark.parametrize("victim", ["job", "runner"])
def test_a_job_killed_by_sigkill_is_gone_only_with_every_process_it_started(
    tmp_path: Path, service: RecordingService, backend: LocalBackend, victim: str
) -> None:
    handle, child_file = launch_verl_job(tmp_path, service, backend)
    child = int(child_file.read_text())
    job = job_pid(handle)
    # The name `rewards.rollouts.write_step_file` writes a step file under until it is whole,
    # as a job killed in the middle of that write leaves it.
    partial = Path(handle["dir"]) / "artifacts" / "rollouts" / ".step-7.parquet.partial"
    partial.parent.mkdir(parents=True, exist_ok=True)
    partial.write_bytes(b"PAR1")
    job_dir = Path(handle["dir"])
    assert not (job_dir / "launch.json").exists()  # the token's hand-off, read and gone
    assert (job_dir / "job.json").exists()
    try:
        os.kill(job if victim == "job" else handle["pid"], signal.SIGKILL)
        status = wait_exited(backend, handle, 60)
        # What the job wrote is stored elsewhere or half-written: only the log, the exit
        # record and the handle stay (the runner cleans up; if it was killed, `status` does,
        # and there is no exit record).
        assert left_in(job_dir) == (ENDED if victim == "job" else ENDED_WITHOUT_RUNNER)
        # The job counts as gone (its devices free) only once verl's raylet stand-in is gone.
        assert gone(child)
        assert gone(job)
        assert status.signal == signal.SIGKILL and not status.oom_killed
        if victim == "runner":
            assert status.detail is not None
            assert status.detail.startswith("the job's runner process was killed; ")
            assert "of the job's processes were still running and were ended" in status.detail
    finally:
        for pid in (child, job):
            if not gone(pid):
                os.kill(pid, signal.SIGKILL)


def test_a_stopped_verl_job_ends_verl_and_its_descendants_before_it_is_gone(
    tmp_path: Path, service: RecordingService, backend: LocalBackend
) -> None:
    """A cancel or a pause with --checkpoint latest: the backend's stop."""
    handle, child_file = launch_verl_job(tmp_path, service, backend)
    child = int(child_file.read_text())
    verl = [
        p.pid
        for p in psutil.Process(job_pid(handle)).children()
        if "fake_verl" in " ".join(p.cmdline())
    ]
    assert verl
    try:
        backend.stop(handle, 5)
        wait_exited(backend, handle, 60)
        assert gone(child) and gone(verl[0])
        assert left_in(Path(handle["dir"])) == ENDED
    finally:
        for pid in (child, *verl):
            if not gone(pid):
                os.kill(pid, signal.SIGKILL)
