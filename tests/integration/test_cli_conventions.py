"""The CLI's conventions against a real trainer (scripted jobs): exit statuses a script can branch
on, refusals as one JSON object, who answered a 401, -q, `runs wait` and `runs logs`."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.integration.helpers import (
    sft_plan,
    start_run,
    wait_phase,
    write_plan,
)

# Every test here starts a trainer process.
pytestmark = pytest.mark.slow


@pytest.fixture
def scripted_env() -> dict[str, str]:
    return {"AKKA_SCRIPTED_STEP_SECONDS": "0.2"}


def test_exit_statuses_and_errors_a_script_can_read(trainer: Any) -> None:
    missing = trainer.cli("training", "runs", "get", "zzzzzz", check=False)
    assert missing.returncode == 4
    assert missing.stderr.strip() == "error: There is no run 'zzzzzz'."

    nosuch = trainer.cli("training", "capacity", "--project", "nosuch", check=False)
    assert nosuch.returncode == 4
    assert nosuch.stderr.strip() == (
        "error: There is no project 'nosuch'; `akka training projects list` shows the projects."
    )

    plan = sft_plan("maths", "maths/train", steps=3)
    plan["execution"]["rolloutGpus"] = 1
    path = write_plan(trainer, plan, "refused.yaml")
    refused = trainer.cli(
        "training", "runs", "start", "-f", str(path), "--dry-run", "-o", "json", check=False
    )
    assert refused.returncode == 1
    error = json.loads(refused.stdout)["error"]
    assert error["code"] == "plan-refused"
    assert error["problems"] == [
        {
            "field": "execution.rolloutGpus",
            "message": "execution.rolloutGpus (1) is not supported under trl: the rollout engine "
            "runs on the training devices. Leave rolloutGpus out or set it to 0, and count every "
            "device in execution.gpus.",
        }
    ]

    denied = trainer.cli(
        "training", "runs", "list", env={"AKKA_ACCESS_TOKEN": "akka_bogus"}, check=False
    )
    assert denied.returncode == 5
    assert denied.stderr.strip().endswith(f"(answered by {trainer.url})")


def test_quiet_wait_and_logs(trainer: Any) -> None:
    path = write_plan(trainer, sft_plan("maths", "maths/train", steps=3), "quiet.yaml")
    started = trainer.cli("training", "runs", "start", "-f", str(path), "-q").stdout.strip()
    assert len(started) >= 8 and " " not in started
    assert trainer.cli("training", "runs", "list", "-q").stdout.split() == [started]

    waited = trainer.cli("training", "runs", "wait", started, "--exit-status").stdout
    lines = waited.splitlines()
    steps = [i for i, line in enumerate(lines) if line.strip().startswith("step ")]
    assert lines[steps[-1]].strip() == "step 3 of 3  loss 0.25"
    completed = next(i for i, line in enumerate(lines) if "-> COMPLETED" in line)
    assert steps[-1] < completed
    assert lines[-1] == f"Run {started} COMPLETED"

    other = start_run(
        trainer, sft_plan("maths", "maths/train", steps=3, modelName="scripted:crash")
    )
    wait_phase(trainer, other, "FAILED")
    chunks = [
        json.loads(line)
        for line in trainer.cli("training", "runs", "logs", other, "-o", "json").stdout.splitlines()
    ]
    assert chunks and chunks[-1]["run"] == other
    assert "scripted crash at step 2" in "".join(c["text"] for c in chunks)
