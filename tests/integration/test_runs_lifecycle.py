"""Runs through the real service, real child processes and the real CLI. The jobs are the
scripted job (a real process speaking the job protocol without training), so these tests are
about the controller, admission, the local backend and the lifecycle, not about TRL."""

from __future__ import annotations

import json
import signal
from typing import Any

import pytest

from tests.conftest import drop_schema, postgres_schema_url
from tests.integration.helpers import (
    ensure_project,
    register_dataset,
    run_get,
    scripted_settings,
    sft_plan,
    start_run,
    steps_of,
    wait_for,
    wait_phase,
)

# Every test here starts trainer processes and runs scripted jobs.
pytestmark = pytest.mark.slow

STEP = {"AKKA_SCRIPTED_STEP_SECONDS": "0.25"}


@pytest.fixture
def scripted_env() -> dict[str, str]:
    return STEP


def test_two_runs_compete_for_one_device_and_run_one_after_the_other(trainer: Any) -> None:
    # Long enough (about 8 s) that it is still training while the second one is looked at.
    first = start_run(trainer, sft_plan("maths", "maths/train", steps=30))
    second = start_run(trainer, sft_plan("maths", "maths/train", steps=2))
    wait_phase(trainer, first, "TRAINING")
    queued = run_get(trainer, second)
    assert queued["phase"] == "QUEUED"
    assert queued["queue"]["position"] == 1
    assert any("devices" in w for w in queued["queue"]["waitingFor"])
    out = trainer.cli("training", "runs", "get", second).stdout
    assert "Queue:" in out and "Waiting for" in out
    capacity = trainer.cli_json("training", "capacity")
    states = {c["for"]: c["state"] for c in capacity["claims"]}
    assert states == {first: "GRANTED", second: "QUEUED"}
    assert capacity["pools"][0]["queued"] == 1
    done_first = wait_phase(trainer, first, "COMPLETED")
    done_second = wait_phase(trainer, second, "COMPLETED")
    assert done_second.started_at is not None and done_first.ended_at is not None
    assert done_second.started_at >= done_first.ended_at
    assert trainer.cli_json("training", "capacity")["claims"] == []
    assert done_first.cost.gpu_seconds > 0


def test_quota_holds_a_second_run_of_the_same_project(trainer_factory: Any) -> None:
    trainer = trainer_factory(
        scripted_settings(pools=[{"name": "default", "accelerator": "cpu", "devices": 2}]), env=STEP
    )
    ensure_project(trainer, "small", quota=1)
    ensure_project(trainer, "other")
    register_dataset(trainer, "small/train")
    register_dataset(trainer, "other/train")
    a = start_run(trainer, sft_plan("small", "small/train", steps=60))
    wait_phase(trainer, a, "PREPARING", "TRAINING")
    b = start_run(trainer, sft_plan("small", "small/train", steps=2))
    c = start_run(trainer, sft_plan("other", "other/train", steps=2))
    wait_phase(trainer, c, "COMPLETED")
    held = run_get(trainer, b)
    assert held["phase"] == "QUEUED"
    assert any("quota" in w for w in held["queue"]["waitingFor"])
    projects = {p["project"]: p for p in trainer.cli_json("training", "capacity")["projects"]}
    assert projects["small"]["held"] == 1 and projects["small"]["queued"] == 1
    trainer.cli("training", "runs", "cancel", a)
    wait_phase(trainer, b, "COMPLETED")


def test_pause_save_then_resume_reports_each_step_once(trainer: Any) -> None:
    run = start_run(trainer, sft_plan("maths", "maths/train", steps=10))
    wait_for(trainer, run, lambda r: r.progress.observed_step >= 3)
    trainer.cli("training", "runs", "pause", run, "--checkpoint", "save")
    paused = wait_phase(trainer, run, "PAUSED")
    saved = paused.progress.saved_step
    assert saved is not None
    assert saved == paused.progress.observed_step >= 3
    assert trainer.cli_json("training", "capacity")["claims"] == []
    trainer.cli("training", "runs", "resume", run)
    done = wait_phase(trainer, run, "COMPLETED")
    assert done.attempt == 2
    assert steps_of(trainer, run) == list(range(1, 11))
    metrics = trainer.cli_json("training", "runs", "metrics", run)["steps"]
    assert {s["attempt"] for s in metrics if s["step"] <= saved} == {1}
    assert {s["attempt"] for s in metrics if s["step"] > saved} == {2}


def test_pause_latest_stops_at_the_last_snapshot(trainer: Any) -> None:
    run = start_run(trainer, sft_plan("maths", "maths/train", steps=12))
    wait_for(trainer, run, lambda r: r.progress.observed_step >= 5)
    trainer.cli("training", "runs", "pause", run, "--checkpoint", "latest")
    paused = wait_phase(trainer, run, "PAUSED")
    saved = paused.progress.saved_step
    assert saved is not None and saved % 2 == 0
    trainer.cli("training", "runs", "resume", run)
    wait_phase(trainer, run, "COMPLETED")
    assert steps_of(trainer, run) == list(range(1, 13))


def test_branch_and_continue_start_from_the_snapshot(trainer: Any) -> None:
    source = start_run(trainer, sft_plan("maths", "maths/train", steps=6))
    wait_phase(trainer, source, "COMPLETED")
    names = [s["name"] for s in trainer.cli_json("training", "runs", "snapshots", source)]
    assert names == ["step-2", "step-4"]
    branched = trainer.cli_json(
        "training", "runs", "branch", source, "--snapshot", "step-4", "--steps", "3"
    )
    continued = trainer.cli_json(
        "training", "runs", "continue", source, "--snapshot", "step-4", "--steps", "3"
    )
    b = wait_phase(trainer, branched["id"], "COMPLETED")
    c = wait_phase(trainer, continued["id"], "COMPLETED")
    assert b.source is not None and c.source is not None
    assert b.source.to_json() == {"run": source, "snapshot": "step-4", "kind": "branch"}
    assert c.source.kind == "continue"
    assert steps_of(trainer, b.id) == [1, 2, 3]
    assert steps_of(trainer, c.id) == [5, 6, 7]
    assert b.settings["source"]["weights"].endswith("step-4/weights/")
    assert c.settings["source"]["trainingState"].endswith("step-4/training-state/")
    tree = trainer.cli("training", "runs", "tree", source).stdout
    assert branched["id"] in tree and continued["id"] in tree and "branch at step-4" in tree


def test_the_service_killed_during_training_restarts_and_the_run_completes(trainer: Any) -> None:
    run = start_run(trainer, sft_plan("maths", "maths/train", steps=14))
    wait_for(trainer, run, lambda r: r.phase == "TRAINING" and r.progress.observed_step >= 2)
    trainer.stop(signal.SIGKILL)
    trainer.start()
    done = wait_phase(trainer, run, "COMPLETED")
    assert done.attempt == 1  # the job outlived the service and kept reporting
    assert steps_of(trainer, run) == list(range(1, 15))


@pytest.mark.parametrize(
    ("mode", "code", "words", "attempts"),
    [
        ("exit-without-report", "job-crashed", "exited without reporting", 2),
        ("crash", "job-crashed", "RuntimeError: scripted crash at step 2", 2),
        ("device-oom", "device-oom", "device memory", 1),
        ("host-oom", "host-oom", "host memory", 1),
        ("sigkill", "job-killed", "killed (SIGKILL) without being asked to stop", 2),
    ],
)
def test_a_job_that_dies_without_a_report_gets_a_classified_reason(
    trainer_factory: Any, mode: str, code: str, words: str, attempts: int
) -> None:
    """Out of memory fails at once; any other death is retried (here once), then fails."""
    trainer = trainer_factory(
        scripted_settings(
            controller={"interval-seconds": 0.2, "retry-base-seconds": 0.2, "job-retries": 1}
        ),
        env=STEP,
    )
    ensure_project(trainer, "maths")
    register_dataset(trainer, "maths/train")
    run = start_run(
        trainer, sft_plan("maths", "maths/train", steps=6, modelName=f"scripted:{mode}")
    )
    failed = wait_phase(trainer, run, "FAILED")
    assert failed.failure is not None
    assert failed.failure.code == code
    assert words in failed.failure.reason
    assert failed.attempt == attempts
    out = trainer.cli("training", "runs", "get", run).stdout
    assert "Failure:" in out
    assert trainer.cli_json("training", "capacity")["claims"] == []


def test_a_backend_that_refuses_launches_ends_with_the_start_failure_sentence(
    trainer_factory: Any,
) -> None:
    trainer = trainer_factory(
        scripted_settings(
            local={"python": "/nonexistent/python3", "stop-grace-seconds": 5},
            controller={"interval-seconds": 0.2, "start-retries": 2, "retry-base-seconds": 0.1},
        )
    )
    ensure_project(trainer, "maths")
    register_dataset(trainer, "maths/train")
    run = start_run(trainer, sft_plan("maths", "maths/train"))
    failed = wait_phase(trainer, run, "FAILED")
    assert failed.failure is not None
    assert (
        failed.failure.first_line == "this run's job could not be started on the training cluster"
    )
    assert "3 tries" in failed.failure.reason
    assert trainer.cli_json("training", "capacity")["claims"] == []


def test_cancel_while_training_stops_the_job_and_frees_the_device(trainer: Any) -> None:
    run = start_run(trainer, sft_plan("maths", "maths/train", steps=40))
    wait_for(trainer, run, lambda r: r.progress.observed_step >= 2)
    trainer.cli("training", "runs", "cancel", run)
    cancelled = wait_phase(trainer, run, "CANCELLED")
    assert cancelled.progress.observed_step < 40
    wait_for(trainer, run, lambda r: True)
    assert trainer.cli_json("training", "capacity")["claims"] == []


def test_a_run_whose_steps_stop_is_marked_stalled(trainer_factory: Any) -> None:
    trainer = trainer_factory(
        scripted_settings(controller={"interval-seconds": 0.2, "stall-seconds": 1.5}), env=STEP
    )
    ensure_project(trainer, "maths")
    register_dataset(trainer, "maths/train")
    run = start_run(trainer, sft_plan("maths", "maths/train", steps=6, modelName="scripted:hang"))
    stalled = wait_for(trainer, run, lambda r: r.stalled is not None, timeout=60)
    assert stalled.phase == "TRAINING"
    assert "Stalled:" in trainer.cli("training", "runs", "get", run).stdout
    trainer.cli("training", "runs", "cancel", run)
    wait_phase(trainer, run, "CANCELLED")


def test_wait_streams_events_and_ends_with_the_record(trainer: Any) -> None:
    run = start_run(trainer, sft_plan("maths", "maths/train", steps=3))
    result = trainer.cli("training", "runs", "wait", run, "-o", "json", "--exit-status")
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert lines[-1]["type"] == "run" and lines[-1]["run"]["phase"] == "COMPLETED"
    phases = [e["data"]["to"] for e in lines if e["type"] == "event" and e["kind"] == "phase"]
    assert phases == ["PREPARING", "TRAINING", "COMPLETED"]
    bad = start_run(trainer, sft_plan("maths", "maths/train", steps=3, modelName="scripted:crash"))
    result = trainer.cli("training", "runs", "wait", bad, "--exit-status", check=False)
    assert result.returncode == 1
    assert "FAILED" in result.stdout


def test_logs_show_the_job_output(trainer: Any) -> None:
    run = start_run(trainer, sft_plan("maths", "maths/train", steps=3, modelName="scripted:crash"))
    wait_phase(trainer, run, "FAILED")
    out = trainer.cli("training", "runs", "logs", run).stdout
    assert "scripted crash at step 2" in out


@pytest.mark.postgres
def test_a_run_completes_on_a_postgres_trainer(trainer_factory: Any, postgres_server: str) -> None:
    schema, url = postgres_schema_url(postgres_server)
    try:
        trainer = trainer_factory(scripted_settings(database={"url": url}), env=STEP)
        assert trainer.cli_json("training", "info")["database"].startswith("postgresql")
        ensure_project(trainer, "maths")
        register_dataset(trainer, "maths/train")
        run = start_run(trainer, sft_plan("maths", "maths/train", steps=4))
        trainer.cli("training", "runs", "pause", run, "--checkpoint", "save")
        wait_phase(trainer, run, "PAUSED")
        trainer.cli("training", "runs", "resume", run)
        wait_phase(trainer, run, "COMPLETED")
        assert steps_of(trainer, run) == [1, 2, 3, 4]
        trainer.close()
    finally:
        drop_schema(postgres_server, schema)
