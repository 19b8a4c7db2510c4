"""What a job is launched with, from rows on SQLite and Postgres: its spec, its token (good for its
own attempt only), its environment, its memory limit and its entry module."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from akka_training.config.settings import load_settings
from akka_training.controller.apply import record_launched
from akka_training.controller.launch import job_addresses, job_env, prepare_launch
from akka_training.core.phases import Phase
from akka_training.core.states import AttemptState, ClaimState
from akka_training.testing.app import InProcessTrainer
from akka_training.testing.otlp_receiver import OtlpReceiver
from tests.controller.rows import add_attempt, add_claim, add_run, add_snapshot, settings_json

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
# What the development models' envelope for sft on TRL at 1 GPU asks of a node.
HOST_MEMORY_BYTES = 4 * 2**30


def resumable_run(trainer: InProcessTrainer) -> None:
    """Run r1 between attempts: the first exited after saving step 4; the second is pending,
    with its devices granted."""
    with trainer.ctx.db.session() as session:
        run = add_run(session, phase=Phase.PREPARING)
        add_claim(session, run)
        add_attempt(session, run, 1, AttemptState.EXITED)
        add_attempt(session, run, 2, AttemptState.PENDING, resume_snapshot="step-4")
        add_snapshot(session, "r1", 2)
        add_snapshot(session, "r1", 4)


def test_a_pending_attempt_gets_its_spec_token_and_environment(
    in_process_factory: Callable[..., InProcessTrainer],
) -> None:
    with OtlpReceiver() as collector:
        trainer = in_process_factory(
            {
                "trainer": {
                    "local": {"enforce-host-memory": True},
                    "reinforcement": {"verl-python": "/opt/verl/bin/python"},
                    "telemetry": {"collector-endpoint": collector.endpoint},
                    "tracking": {"mlflow-uri": "http://mlflow.example:5000"},
                    "controller": {"stall-seconds": 120},
                }
            }
        )
        resumable_run(trainer)

        request = prepare_launch(trainer.ctx, "r1", 2, TRACEPARENT)
        trainer.close()  # while the collector listens: the service exports what it holds

    assert request is not None
    assert (request.run_id, request.attempt, request.pool, request.devices) == (
        "r1",
        2,
        "default",
        1,
    )
    assert request.device_ids == [0]
    assert request.job_spec == {
        "runId": "r1",
        "attempt": 2,
        "project": "maths",
        "modelName": None,
        "pipeline": None,
        "stage": None,
        "trainerUrl": "http://127.0.0.1:9001",
        "storageUrl": f"file://{trainer.home.resolve()}/blobs",
        "storageS3": {"endpointUrl": None, "region": None, "pathStyle": False, "partSizeMib": 8},
        "settings": settings_json(),
        "resume": {
            "snapshot": "step-4",
            "step": 4,
            "weights": "runs/r1/snapshots/step-4/weights/",
            "trainingState": "runs/r1/snapshots/step-4/training-state/",
        },
        "telemetry": {
            "collectorEndpoint": collector.endpoint,
            "traceparent": TRACEPARENT,
            "stallSeconds": 120.0,
            "reportSeconds": 1.0,
            "mlflowUri": "http://mlflow.example:5000",
        },
        "generation": {"engine": "auto", "vllmGpuMemoryUtilization": 0.3, "vllmSleepMode": True},
        "maxSteps": None,
    }
    assert sorted(request.env) == ["AKKA_JOB_BOOTSTRAP", "AKKA_VERL_PYTHON", "TRACEPARENT"]
    assert request.env["TRACEPARENT"] == TRACEPARENT
    assert request.env["AKKA_VERL_PYTHON"] == "/opt/verl/bin/python"
    assert request.host_memory_bytes == HOST_MEMORY_BYTES
    assert request.entry_module == "akka_training.testing.scripted_job"


def test_the_job_token_reports_for_its_own_attempt_only(
    in_process_factory: Callable[..., InProcessTrainer],
) -> None:
    trainer = in_process_factory()
    resumable_run(trainer)
    request = prepare_launch(trainer.ctx, "r1", 2)
    assert request is not None
    job = trainer.job_client(request)

    own = job.post("/v1/jobs/r1/attempts/2/heartbeat", json={"step": 4})
    earlier = job.post("/v1/jobs/r1/attempts/1/heartbeat", json={"step": 4})
    read = job.get("/v1/runs/r1")

    assert (own.status_code, own.json()) == (200, {"action": "continue"})
    assert (earlier.status_code, earlier.json()) == (
        403,
        {
            "error": {
                "code": "forbidden",
                "message": "This token reports for another run or attempt.",
            }
        },
    )
    assert (read.status_code, read.json()["error"]["message"]) == (
        403,
        "A job token can only report for its own run.",
    )


def test_a_plain_deployment_runs_the_engines_with_the_runs_own_trace(
    in_process_factory: Callable[..., InProcessTrainer],
) -> None:
    trainer = in_process_factory({"trainer": {"testing": {"scripted-jobs": False}}})
    with trainer.ctx.db.session() as session:
        run = add_run(session, phase=Phase.PREPARING)
        add_claim(session, run)
        add_attempt(session, run, 1, AttemptState.PENDING)
        traced = run.traceparent
        quiet = add_run(session, "r2", phase=Phase.PREPARING)
        quiet.traceparent = None
        add_claim(session, quiet)
        add_attempt(session, quiet, 1, AttemptState.PENDING)

    request = prepare_launch(trainer.ctx, "r1", 1)
    untraced = prepare_launch(trainer.ctx, "r2", 1)

    assert request is not None and untraced is not None
    assert request.entry_module == "akka_training.engines.job"
    assert request.host_memory_bytes is None  # the envelope's host memory is not enforced
    assert request.job_spec["resume"] is None  # a first attempt starts from nothing
    assert request.env["TRACEPARENT"] == traced
    assert request.job_spec["telemetry"] == {
        "collectorEndpoint": None,
        "traceparent": traced,
        "stallSeconds": 600.0,
        "reportSeconds": 1.0,
        "mlflowUri": None,
    }
    assert sorted(untraced.env) == ["AKKA_JOB_BOOTSTRAP"]
    assert untraced.job_spec["telemetry"]["traceparent"] is None
    assert request.job_spec["generation"] == {
        "engine": "auto",
        "vllmGpuMemoryUtilization": 0.3,
        "vllmSleepMode": True,
    }


def test_the_deployments_generation_settings_reach_the_job(
    in_process_factory: Callable[..., InProcessTrainer],
) -> None:
    trainer = in_process_factory(
        {
            "trainer": {
                "reinforcement": {
                    "trl-generation": "vllm",
                    "vllm-gpu-memory-utilization": 0.5,
                    "vllm-sleep-mode": False,
                }
            }
        }
    )
    with trainer.ctx.db.session() as session:
        run = add_run(session, phase=Phase.PREPARING)
        add_claim(session, run)
        add_attempt(session, run, 1, AttemptState.PENDING)

    request = prepare_launch(trainer.ctx, "r1", 1)

    assert request is not None
    assert request.job_spec["generation"] == {
        "engine": "vllm",
        "vllmGpuMemoryUtilization": 0.5,
        "vllmSleepMode": False,
    }


def test_a_snapshot_without_training_state_gives_nothing_to_resume(
    in_process_factory: Callable[..., InProcessTrainer],
) -> None:
    trainer = in_process_factory()
    with trainer.ctx.db.session() as session:
        run = add_run(session, phase=Phase.PREPARING)
        add_claim(session, run)
        add_attempt(session, run, 1, AttemptState.EXITED)
        add_attempt(session, run, 2, AttemptState.PENDING, resume_snapshot="step-4")
        add_snapshot(session, "r1", 4, training_state=False)

    request = prepare_launch(trainer.ctx, "r1", 2)

    assert request is not None and request.job_spec["resume"] is None


def test_nothing_is_launched_for_an_attempt_that_moved_on_or_devices_not_granted(
    in_process_factory: Callable[..., InProcessTrainer],
) -> None:
    trainer = in_process_factory()
    resumable_run(trainer)
    with trainer.ctx.db.session() as session:
        waiting = add_run(session, "r2", phase=Phase.QUEUED)
        add_claim(session, waiting, ClaimState.QUEUED)
        add_attempt(session, waiting, 1, AttemptState.PENDING)

    assert prepare_launch(trainer.ctx, "r1", 1) is None  # exited
    assert prepare_launch(trainer.ctx, "r1", 3) is None  # does not exist
    assert prepare_launch(trainer.ctx, "r2", 1) is None  # its claim still waits for devices
    assert prepare_launch(trainer.ctx, "nope", 1) is None
    record_launched(trainer.ctx.db, "r1", 2, {"pid": 1})
    assert prepare_launch(trainer.ctx, "r1", 2) is None  # launched already


def test_runs_and_tasks_get_the_addresses_a_ray_worker_reaches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AKKA_HOME", str(tmp_path))
    path = tmp_path / "settings.yaml"
    path.write_text(
        "trainer:\n"
        "  backend: ray\n"
        "  ray:\n"
        "    trainer-url: http://trainer.cluster.local:9001\n"
        "  storage:\n"
        "    url: s3://bucket/akka\n"
        "    s3:\n"
        "      endpoint-url: http://127.0.0.1:9000\n"
        "      access-key-id: AKIDEXAMPLE\n"
        "      secret-access-key: secret\n"
    )
    settings = load_settings(path)

    addresses = job_addresses(settings)
    env = job_env("AKKA_TASK_BOOTSTRAP", "bootstrap-1", TRACEPARENT)

    # The worker's own address of the service; the store as the service names it.
    assert addresses.trainer_url == "http://trainer.cluster.local:9001"
    assert addresses.storage_url == "s3://bucket/akka"
    assert addresses.storage_s3.endpoint_url == "http://127.0.0.1:9000"
    # The store's credentials are not in it: the job gets them by its bootstrap exchange.
    assert env == {"AKKA_TASK_BOOTSTRAP": "bootstrap-1", "TRACEPARENT": TRACEPARENT}
