"""A real training job (TRL on the tiny development model) killed from outside, by pid: SIGTERM
saves a snapshot at the end of the step in progress and stops, and the run goes on from it;
SIGKILL runs it again from its last committed snapshot. Either way the run completes."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import psutil
import pytest

from akka_training.testing.waiting import until
from tests.integration.helpers import ensure_project, start_run, steps_of, wait_for, wait_phase

pytestmark = pytest.mark.slow

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "data"


@pytest.fixture
def trainer(trainer_factory: Any, dev_models: Path) -> Any:
    t = trainer_factory(
        {
            "trainer": {
                "dev-models-dir": str(dev_models),
                # Reports every 0.5 s: the tests act at a step seen early in a run of steps of
                # a few hundredths of a second, which must not have ended by then.
                "controller": {
                    "interval-seconds": 0.2,
                    "retry-base-seconds": 0.2,
                    "report-seconds": 0.5,
                },
            }
        }
    )
    ensure_project(t, "demo")
    t.cli(
        "training",
        "datasets",
        "register",
        "demo/arithmetic",
        "-f",
        str(EXAMPLES / "arithmetic.jsonl"),
    )
    return t


def plan(steps: int, save_every: int) -> dict[str, Any]:
    return {
        "kind": "run",
        "project": "demo",
        "baseModel": "tiny-chat",
        "config": {
            "dataset": "demo/arithmetic",
            "method": "sft",
            "maxSeqLength": 128,
            "hyperparams": {"training": {"maxSteps": steps, "batchSize": 4}},
        },
        "execution": {"saveEvery": save_every},
    }


def job_of(trainer: Any, run: str) -> psutil.Process:
    handle = json.loads((Path(trainer.home) / "jobs" / run / "1" / "handle.json").read_text())
    runner = psutil.Process(handle["pid"])
    return until(runner.children, what="the runner to start its job", timeout=30)[0]


def events_of(trainer: Any, run: str) -> list[str]:
    with trainer.client() as client:
        return [line.message for line in client.wait_run(run, timeout=1) if line.type == "event"]


def test_sigterm_to_a_training_job_saves_where_it_is_and_the_run_goes_on(trainer: Any) -> None:
    run = start_run(trainer, plan(steps=60, save_every=50))
    wait_for(trainer, run, lambda r: r.phase == "TRAINING" and r.progress.observed_step >= 3)
    job_of(trainer, run).send_signal(signal.SIGTERM)

    done = wait_phase(trainer, run, "COMPLETED", "FAILED", timeout=300)
    assert done.phase == "COMPLETED", done.failure
    assert done.attempt == 2
    messages = events_of(trainer, run)
    stopped = [m for m in messages if m.startswith("attempt 1 stopped at step")]
    assert stopped, messages
    step = int(stopped[0].rsplit(" ", 1)[1])
    assert 3 <= step < 50  # saved where it was, not at a saveEvery step
    assert f"attempt 2 created from snapshot step-{step}" in messages
    assert steps_of(trainer, run) == list(range(1, 61))


def test_sigkill_of_a_training_job_runs_it_again_from_its_last_snapshot(trainer: Any) -> None:
    run = start_run(trainer, plan(steps=30, save_every=4))
    wait_for(trainer, run, lambda r: r.phase == "TRAINING" and r.progress.observed_step >= 9)
    job_of(trainer, run).kill()

    done = wait_phase(trainer, run, "COMPLETED", "FAILED", timeout=300)
    assert done.phase == "COMPLETED", done.failure
    assert done.attempt == 2
    messages = events_of(trainer, run)
    assert any(
        m.startswith("attempt 1 died without a report (the job's process was killed (SIGKILL)")
        for m in messages
    ), messages
    assert any(m.startswith("attempt 2 created from snapshot step-") for m in messages)
    assert steps_of(trainer, run) == list(range(1, 31))
