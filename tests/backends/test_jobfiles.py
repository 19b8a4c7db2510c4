"""What an ended job's directory keeps, and when it goes (`backends.jobfiles`), and the local
backend's tidying of what ended jobs left while the service was down."""

from __future__ import annotations

import json
import os
from pathlib import Path

from akka_training.backends import jobfiles
from akka_training.backends.local.backend import LocalBackend

DAY = 86400.0
ENDED_AT = 1_750_000_000.0  # when the job last wrote


def ended_job(job_dir: Path) -> Path:
    """A job's directory as an ended attempt leaves it."""
    jobfiles.mark(job_dir)
    for name in ("job.log", "exit.json", "handle.json", "job.json", "launch.json"):
        (job_dir / name).write_text("{}")
    (job_dir / "checkpoints" / "checkpoint-4").mkdir(parents=True)
    (job_dir / "checkpoints" / "checkpoint-4" / "optimizer.pt").write_bytes(b"x" * 64)
    (job_dir / "resume").mkdir()
    (job_dir / ".step-7.parquet.partial").write_bytes(b"PAR1")
    for path in job_dir.rglob("*"):
        os.utime(path, (ENDED_AT, ENDED_AT))
    return job_dir


def names(job_dir: Path) -> list[str]:
    return sorted(p.name for p in job_dir.iterdir())


def test_an_ended_job_keeps_its_log_exit_record_and_handle_only(tmp_path: Path) -> None:
    job_dir = ended_job(tmp_path / "r-1" / "1")
    jobfiles.remove_stored_elsewhere(job_dir)
    assert names(job_dir) == [".akka-job", "exit.json", "handle.json", "job.log"]


def test_a_directory_no_backend_marked_is_never_emptied(tmp_path: Path) -> None:
    job_dir = ended_job(tmp_path / "r-1" / "1")
    (job_dir / ".akka-job").unlink()
    before = names(job_dir)
    jobfiles.remove_stored_elsewhere(job_dir)
    assert names(job_dir) == before


def test_a_sweep_leaves_running_jobs_and_removes_logs_once_they_are_old(tmp_path: Path) -> None:
    ended = ended_job(tmp_path / "r-1" / "1")
    running = ended_job(tmp_path / "r-2" / "1")
    changed = ENDED_AT

    def sweep(at: float) -> int:
        return jobfiles.sweep(
            tmp_path, lambda d: d == running, keep_logs_seconds=14 * DAY, now=lambda: at
        )

    assert sweep(changed + 13 * DAY) == 0
    assert names(ended) == [".akka-job", "exit.json", "handle.json", "job.log"]
    assert "checkpoints" in names(running)
    assert sweep(changed + 14 * DAY) == 1
    assert not (tmp_path / "r-1").exists()  # the run's directory too, once empty
    assert "checkpoints" in names(running)


def test_a_held_directory_is_running_until_its_holder_lets_go(tmp_path: Path) -> None:
    job_dir = tmp_path / "r-1" / "1"
    fd = jobfiles.hold(job_dir)
    assert jobfiles.held(job_dir)
    assert jobfiles.sweep(tmp_path, jobfiles.held, keep_logs_seconds=0) == 0
    os.close(fd)  # as the job's exit does
    assert not jobfiles.held(job_dir)
    assert jobfiles.sweep(tmp_path, jobfiles.held, keep_logs_seconds=0) == 1


def test_the_local_backend_tidies_jobs_that_ended_while_it_was_down(tmp_path: Path) -> None:
    jobs = tmp_path / "jobs"
    job_dir = ended_job(jobs / "r-1" / "1")
    # The runner was killed with the service: no exit record, and no process behind the handle.
    (job_dir / "exit.json").unlink()
    (job_dir / "handle.json").write_text(json.dumps({"pid": 2**22 + 7, "created": 0.0}))
    os.utime(job_dir / "handle.json", (ENDED_AT, ENDED_AT))
    changed = ENDED_AT
    LocalBackend(jobs, {"default": 1}, keep_logs_seconds=DAY, clock=lambda: changed + 60)
    assert names(job_dir) == [".akka-job", "handle.json", "job.log"]
    LocalBackend(jobs, {"default": 1}, keep_logs_seconds=DAY, clock=lambda: changed + DAY)
    assert not job_dir.exists()
