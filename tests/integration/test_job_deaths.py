"""A job's processes killed from outside, by pid, while the run trains: the real service, the
local backend's real runner and the scripted job (a real process speaking the job protocol).
A job that dies without a report runs again from the run's last snapshot; one that keeps dying
fails with the true cause; SIGTERM is a save-and-stop."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import psutil
import pytest

from akka_training.testing.waiting import until
from tests.integration.helpers import (
    ensure_project,
    register_dataset,
    scripted_settings,
    sft_plan,
    start_run,
    steps_of,
    wait_for,
    wait_phase,
)

pytestmark = pytest.mark.slow

STEP = {"AKKA_SCRIPTED_STEP_SECONDS": "0.3"}


@pytest.fixture
def scripted_env() -> dict[str, str]:
    return STEP


def runner_and_job(trainer: Any, run: str, attempt: int) -> tuple[psutil.Process, psutil.Process]:
    """The local runner of the run's attempt and the job it started, by their pids."""
    handle = json.loads(
        (Path(trainer.home) / "jobs" / run / str(attempt) / "handle.json").read_text()
    )
    runner = psutil.Process(handle["pid"])
    children = until(runner.children, what="the runner to start its job", timeout=30)
    return runner, children[0]


def events_of(trainer: Any, run: str) -> list[str]:
    with trainer.client() as client:
        return [line.message for line in client.wait_run(run, timeout=1) if line.type == "event"]


@pytest.mark.parametrize("victim", ["runner", "job"])
def test_kill_9_during_training_runs_again_from_the_last_snapshot(
    trainer: Any, victim: str
) -> None:
    run = start_run(trainer, sft_plan("maths", "maths/train", steps=10))
    wait_for(trainer, run, lambda r: r.phase == "TRAINING" and r.progress.observed_step >= 5)
    runner, job = runner_and_job(trainer, run, 1)
    os.kill((runner if victim == "runner" else job).pid, signal.SIGKILL)

    done = wait_phase(trainer, run, "COMPLETED", "FAILED")
    assert done.phase == "COMPLETED", done.failure
    assert done.attempt == 2
    # The second attempt started from the last snapshot (step 4 or later): each step once.
    assert steps_of(trainer, run) == list(range(1, 11))
    assert any(
        "attempt 1 died without a report" in e and "retry 1 of 3" in e
        for e in events_of(trainer, run)
    ), events_of(trainer, run)
    resumed = [
        e for e in events_of(trainer, run) if e.startswith("attempt 2 created from snapshot")
    ]
    assert resumed, events_of(trainer, run)
    assert int(resumed[0].rsplit("step-", 1)[1]) >= 4
    # Nothing of the first attempt is left running.
    assert not job.is_running() or job.status() == psutil.STATUS_ZOMBIE
    assert not runner.is_running() or runner.status() == psutil.STATUS_ZOMBIE


def test_sigterm_to_the_job_saves_stops_and_the_run_goes_on(trainer: Any) -> None:
    run = start_run(trainer, sft_plan("maths", "maths/train", steps=10))
    wait_for(trainer, run, lambda r: r.phase == "TRAINING" and r.progress.observed_step >= 3)
    _, job = runner_and_job(trainer, run, 1)
    job.send_signal(signal.SIGTERM)

    done = wait_phase(trainer, run, "COMPLETED", "FAILED")
    assert done.phase == "COMPLETED", done.failure
    assert done.attempt == 2
    assert steps_of(trainer, run) == list(range(1, 11))
    messages = events_of(trainer, run)
    stopped = [m for m in messages if m.startswith("attempt 1 stopped at step")]
    assert stopped, messages
    step = int(stopped[0].rsplit(" ", 1)[1])
    # It saved where it stopped (not at the last even step before): the next attempt starts there.
    assert f"attempt 2 created from snapshot step-{step}" in messages


def test_a_job_killed_on_every_attempt_fails_as_killed_after_its_retries(
    trainer_factory: Any,
) -> None:
    trainer = trainer_factory(
        scripted_settings(
            controller={"interval-seconds": 0.2, "retry-base-seconds": 0.2, "job-retries": 2}
        ),
        env=STEP,
    )
    ensure_project(trainer, "maths")
    register_dataset(trainer, "maths/train")
    run = start_run(
        trainer, sft_plan("maths", "maths/train", steps=6, modelName="scripted:sigkill")
    )

    failed = wait_phase(trainer, run, "FAILED")
    assert failed.attempt == 3
    assert failed.failure is not None
    assert failed.failure.code == "job-killed"
    assert failed.failure.first_line.startswith(
        "this run's job was killed (SIGKILL) though the trainer did not ask it to stop"
    )
    assert (
        "the job died without a report on 3 attempts in a row; the last:" in failed.failure.reason
    )
    assert "the kernel recorded no out-of-memory kill" in failed.failure.reason
    assert "host memory" not in failed.failure.reason
    messages = events_of(trainer, run)
    assert any("attempt 3 launches in 0.4 s (back-off after 2 in a row" in m for m in messages), (
        messages
    )
    assert trainer.cli_json("training", "capacity")["claims"] == []
