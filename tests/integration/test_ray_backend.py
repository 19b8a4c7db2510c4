"""The `ray` backend end to end: a real local Ray head (tests/ray_cluster.py), the real service
with ``trainer.backend: ray``, jobs submitted through Ray's job API and run by Ray, and the real
CLI. The lifecycle tests run the scripted job (a real process that speaks the job protocol and
trains nothing), so they are about the backend and the controller, not about TRL."""

from __future__ import annotations

import json
import secrets
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from akka_training.backends.base import LaunchRefused, LaunchRequest
from akka_training.backends.ray import RayBackend
from akka_training.config.pools import PoolSpec
from akka_training.config.settings import RayBackend as RaySettings
from akka_training.testing.waiting import until
from tests.integration.helpers import (
    SCRIPTED_CATALOG,
    ensure_project,
    register_dataset,
    run_get,
    scripted_settings,
    sft_plan,
    start_run,
    steps_of,
    wait_for,
    wait_phase,
    write_plan,
)
from tests.ray_cluster import RayHead

# Every test here starts or uses a Ray head.
pytestmark = [pytest.mark.ray, pytest.mark.slow]

START_FAILED = "this run's job could not be started on the training cluster"
UNREACHABLE = "the training cluster could not be reached while this run waited for its devices"


def ray_settings(
    head: RayHead, ray: dict[str, Any] | None = None, **trainer: Any
) -> dict[str, Any]:
    """Settings of a service whose jobs run on `head` (one CPU device in the pool `default`)."""
    settings = scripted_settings(**trainer)
    settings["trainer"]["backend"] = "ray"
    settings["trainer"]["ray"] = {
        "address": head.dashboard_url,
        "python": sys.executable,
        "work-dir": str(head.jobs_dir),
        # The scripted job's pace reaches it through the runtime env, as any job variable would.
        "runtime-env": {"env_vars": {"AKKA_SCRIPTED_STEP_SECONDS": "0.25"}},
        **(ray or {}),
    }
    return settings


def ray_jobs(head: RayHead) -> Any:
    """Ray's own job client, to see the cluster's side. Imported here so that a test
    environment without Ray fails on the head fixture's message, not on this import."""
    from ray.job_submission import JobSubmissionClient

    return JobSubmissionClient(head.dashboard_url)


def job_info(head: RayHead, run_id: str, attempt: int) -> Any:
    return ray_jobs(head).get_job_info(f"akka-{run_id}-{attempt}")


def ended_after_its_report(head: RayHead, run_id: str, attempt: int) -> bool:
    """Whether the attempt's job sent its final report and ended. Ray learns of the exit a
    moment after the service learns of the report, and the controller stops a job whose run has
    ended while it still runs, so such a job ends SUCCEEDED or, as often, STOPPED."""
    info = until(
        lambda: (i := job_info(head, run_id, attempt)).status not in ("PENDING", "RUNNING") and i,
        what=f"the job of {run_id}'s attempt {attempt} to end",
        timeout=30,
        interval=0.2,
    )
    return info.status in ("SUCCEEDED", "STOPPED") and info.driver_exit_code in (0, None)


@pytest.fixture
def trainer(trainer_factory: Any, ray_head: RayHead) -> Any:
    t = trainer_factory(ray_settings(ray_head))
    ensure_project(t, "maths")
    register_dataset(t, "maths/train")
    return t


def test_a_run_trains_as_a_ray_job_and_completes(trainer: Any, ray_head: RayHead) -> None:
    assert trainer.cli_json("training", "info")["backend"] == "ray"
    pool = trainer.cli_json("training", "capacity")["pools"][0]
    assert pool["observed"] == 2  # the head's 2 CPUs, one device each
    run = start_run(trainer, sft_plan("maths", "maths/train", steps=4))
    done = wait_phase(trainer, run, "COMPLETED", timeout=90)
    assert done.attempt == 1
    assert steps_of(trainer, run) == [1, 2, 3, 4]
    assert ended_after_its_report(ray_head, run, 1)
    info = job_info(ray_head, run, 1)
    assert info.metadata["akka.run"] == run and info.metadata["akka.pool"] == "default"
    assert info.entrypoint.startswith(
        f"exec {sys.executable} -m akka_training.backends.ray.bootstrap"
    )
    env_vars = info.runtime_env["env_vars"]
    assert {"AKKA_JOB_BOOTSTRAP", "AKKA_JOB_SPEC", "AKKA_SCRIPTED_STEP_SECONDS"} <= set(env_vars)
    assert env_vars["CUDA_VISIBLE_DEVICES"] == ""  # a CPU pool
    # The job's working directory on the worker holds its spec.
    assert (ray_head.jobs_dir / run / "1" / "job.json").exists()
    logs = trainer.cli("training", "runs", "logs", run).stdout
    assert f"Running entrypoint for job akka-{run}-1" in logs
    assert trainer.cli_json("training", "capacity")["claims"] == []


def test_pause_save_then_resume_runs_a_second_ray_job(trainer: Any, ray_head: RayHead) -> None:
    run = start_run(trainer, sft_plan("maths", "maths/train", steps=10))
    wait_for(trainer, run, lambda r: r.progress.observed_step >= 3, timeout=90)
    trainer.cli("training", "runs", "pause", run, "--checkpoint", "save")
    paused = wait_phase(trainer, run, "PAUSED")
    saved = paused.progress.saved_step
    assert saved is not None
    assert saved == paused.progress.observed_step >= 3
    assert ended_after_its_report(ray_head, run, 1)
    assert trainer.cli_json("training", "capacity")["claims"] == []
    trainer.cli("training", "runs", "resume", run)
    done = wait_phase(trainer, run, "COMPLETED", timeout=90)
    assert done.attempt == 2
    assert steps_of(trainer, run) == list(range(1, 11))
    assert ended_after_its_report(ray_head, run, 2)


def test_cancel_while_training_stops_the_ray_job(trainer: Any, ray_head: RayHead) -> None:
    run = start_run(trainer, sft_plan("maths", "maths/train", steps=200))
    wait_for(trainer, run, lambda r: r.progress.observed_step >= 2, timeout=90)
    trainer.cli("training", "runs", "cancel", run)
    cancelled = wait_phase(trainer, run, "CANCELLED")
    assert cancelled.progress.observed_step < 200
    assert job_info(ray_head, run, 1).status == "STOPPED"
    assert trainer.cli_json("training", "capacity")["claims"] == []


def test_a_submission_ray_refuses_fails_the_run_with_the_start_sentence(
    trainer_factory: Any, ray_head: RayHead
) -> None:
    # A deployment runtime env Ray refuses at submission: env_vars values must be strings.
    trainer = trainer_factory(
        ray_settings(
            ray_head,
            ray={"runtime-env": {"env_vars": {"OMP_NUM_THREADS": 4}}},
            controller={"interval-seconds": 0.2, "start-retries": 1, "retry-base-seconds": 0.1},
        )
    )
    ensure_project(trainer, "maths")
    register_dataset(trainer, "maths/train")
    run = start_run(trainer, sft_plan("maths", "maths/train"))
    failed = wait_phase(trainer, run, "FAILED", timeout=60)
    assert failed.failure is not None
    assert failed.failure.first_line == START_FAILED
    assert "2 tries" in failed.failure.reason
    assert "Ray refused the job" in failed.failure.reason
    assert "env_vars" in failed.failure.reason
    assert trainer.cli_json("training", "capacity")["claims"] == []
    jobs = [j for j in ray_jobs(ray_head).list_jobs() if (j.metadata or {}).get("akka.run") == run]
    assert jobs == []


def test_a_run_waiting_for_devices_fails_when_the_head_stops(
    trainer_factory: Any, ray_head_factory: Callable[..., RayHead]
) -> None:
    # This head runs in Ray's token mode: the service reaches it with the token in its
    # environment, as a deployment on a token-authenticated cluster does.
    head = ray_head_factory(auth_token=secrets.token_hex(32))
    assert httpx.get(f"{head.dashboard_url}/api/jobs/", timeout=5).status_code == 401
    trainer = trainer_factory(
        ray_settings(head, controller={"interval-seconds": 0.2, "unreachable-seconds": 2}),
        env=head.client_env,
    )
    ensure_project(trainer, "maths")
    register_dataset(trainer, "maths/train")
    holder = start_run(trainer, sft_plan("maths", "maths/train", steps=400))
    wait_phase(trainer, holder, "TRAINING", timeout=90)
    waiting = start_run(trainer, sft_plan("maths", "maths/train", steps=2))
    assert run_get(trainer, waiting)["phase"] == "QUEUED"
    head.stop()
    failed = wait_phase(trainer, waiting, "FAILED", timeout=60)
    assert failed.failure is not None and failed.failure.first_line == UNREACHABLE
    assert trainer.cli_json("training", "capacity")["pools"][0]["observed"] is None


def test_a_real_sft_run_trains_on_ray(
    trainer_factory: Any, ray_head: RayHead, dev_models: Path
) -> None:
    """The TRL engine's SFT on the development model, as a Ray job: the adapter it saves is
    the run's model."""
    settings = ray_settings(ray_head, dev_models_dir=str(dev_models))
    del settings["trainer"]["testing"], settings["trainer"]["catalog"]
    settings["trainer"]["ray"].pop("runtime-env")
    trainer = trainer_factory(settings)
    ensure_project(trainer, "maths")
    register_dataset(trainer, "maths/train")
    run = start_run(trainer, sft_plan("maths", "maths/train", steps=4))
    done = wait_phase(trainer, run, "COMPLETED", "FAILED", timeout=240)
    assert done.phase == "COMPLETED", trainer.cli("training", "runs", "logs", run).stdout
    assert steps_of(trainer, run) == [1, 2, 3, 4]
    assert done.results.training_loss is not None and done.results.training_loss > 0
    assert done.results.model is not None
    adapter = trainer.home / "blobs" / done.results.model
    assert (adapter / "adapter_model.safetensors").stat().st_size > 0
    info = job_info(ray_head, run, 1)
    assert " --entry akka_training.engines.job " in info.entrypoint
    assert ended_after_its_report(ray_head, run, 1)
    # The job ran in its working directory on the worker and emptied it as it ended: all it
    # wrote there (figures, checkpoints) is stored elsewhere; only the directory's mark stays,
    # for the next job on the node to sweep.
    job_dir = ray_head.jobs_dir / run / "1"
    assert sorted(p.name for p in job_dir.iterdir()) == [".akka-job"]
    # Its placement names the pod and node the worker's environment gives it.
    events = [
        json.loads(line)
        for line in trainer.cli("training", "runs", "wait", run, "-o", "json").stdout.splitlines()
    ]
    started = [
        e["data"] for e in events if e["type"] == "event" and e["kind"] == "job" and e["data"]
    ]
    assert started[0]["host"] == socket.gethostname()
    assert (started[0]["node"], started[0]["pod"]) == (ray_head.node_name, ray_head.pod_name)


def test_a_claim_above_what_any_node_offers_is_refused_at_submission(
    trainer_factory: Any, ray_head: RayHead
) -> None:
    # The pool is declared with 4 devices and accepts claims of 4, but its one node offers 2
    # (2 CPUs, a CPU each): Ray would keep a 3-device job PENDING, as it sums nodes and never
    # splits a job over them. The refusal comes at once, for a dry run and a submission alike,
    # and no run is made.
    catalog = [
        {
            **SCRIPTED_CATALOG[0],
            "envelopes": [
                {"method": "sft", "engine": "trl", "gpus": g, "precision": "FP32"} for g in (1, 3)
            ],
        }
    ]
    settings = ray_settings(
        ray_head, catalog=catalog, pools=[{"name": "default", "accelerator": "cpu", "devices": 4}]
    )
    trainer = trainer_factory(settings)
    ensure_project(trainer, "maths")
    register_dataset(trainer, "maths/train")
    plan = sft_plan("maths", "maths/train")
    plan["execution"]["gpus"] = 3
    path = write_plan(trainer, plan)
    for dry_run in (["--dry-run"], []):
        result = trainer.cli("training", "runs", "start", "-f", str(path), *dry_run, check=False)
        assert result.returncode == 1, result.stdout
        assert "Traceback" not in result.stderr
        assert (
            "execution.gpus (3) is more than any single node of pool default offers (the "
            "largest offers 2), and a run's devices are on one node: it would wait for devices "
            "no node has. Set execution.gpus to 2 or less, or choose another execution.pool."
        ) in " ".join(result.stderr.split())
    assert trainer.cli_json("training", "runs", "list", "--project", "maths") == []
    plan["execution"]["gpus"] = 1
    assert start_run(trainer, plan)


# --- the backend alone against the head -------------------------------------------------------


def _backend(head: RayHead, label: str = "default", python: str = sys.executable) -> RayBackend:
    settings = RaySettings(address=head.dashboard_url, python=python, work_dir=str(head.jobs_dir))
    return RayBackend(settings, [PoolSpec("default", "cpu", 1, 1, None, label)])


def _request(run_id: str, spec: dict[str, Any]) -> LaunchRequest:
    # `json.tool` as the job: it prints the job.json the bootstrap wrote.
    return LaunchRequest(
        run_id=run_id,
        attempt=1,
        pool="default",
        devices=1,
        device_ids=[0],
        job_spec=spec,
        env={"AKKA_JOB_BOOTSTRAP": "secret"},
        entry_module="json.tool",
    )


def test_a_second_launch_of_an_attempt_finds_the_first_job(ray_head: RayHead) -> None:
    backend = _backend(ray_head)
    run_id = f"r-twice-{time.monotonic_ns()}"
    request = _request(run_id, {"marker": run_id})
    first = backend.launch(request)
    assert backend.launch(request) == first == {"submission_id": f"akka-{run_id}-1"}
    jobs = [
        j for j in ray_jobs(ray_head).list_jobs() if (j.metadata or {}).get("akka.run") == run_id
    ]
    assert len(jobs) == 1
    status = until(
        lambda: (s := backend.status(first)).state != "running" and s,
        what="the job to end",
        timeout=60,
        interval=0.2,
    )
    assert (status.state, status.exit_code) == ("exited", 0)
    text, offset = backend.logs(first)
    assert f'"marker": "{run_id}"' in text
    tail, end = backend.logs(first, -40)
    assert end == offset and text.endswith(tail) and len(tail.encode()) == 40
    backend.stop(first, 5)  # an ended job: nothing to do, no error


def test_ray_refuses_a_label_selector_and_unknown_jobs_are_missing(ray_head: RayHead) -> None:
    backend = _backend(ray_head, label="not a label!")
    with pytest.raises(LaunchRefused, match="Invalid label selector value"):
        backend.launch(_request(f"r-bad-{time.monotonic_ns()}", {}))
    assert backend.observe()["default"].devices == 0  # no node carries that label
    assert _backend(ray_head).observe()["default"].devices == 2
    unknown = {"submission_id": "akka-r-never-1"}
    assert backend.status(unknown).state == "missing"
    assert backend.logs(unknown) == ("", 0)
    backend.stop(unknown, 5)


def test_an_interpreter_missing_on_the_node_is_a_failed_job_not_a_refusal(
    ray_head: RayHead,
) -> None:
    backend = _backend(ray_head, python="/nonexistent/bin/python3")
    handle = backend.launch(_request(f"r-nopython-{time.monotonic_ns()}", {}))
    status = until(
        lambda: (s := backend.status(handle)).state != "running" and s,
        what="the job to end",
        timeout=60,
        interval=0.2,
    )
    assert (status.state, status.exit_code) == ("exited", 127)
    assert "trainer.ray.python" in (status.detail or "")
    assert "/nonexistent/bin/python3: not found" in backend.logs(handle)[0]
