"""The service's telemetry hears of its own application's failed runs only: the listener belongs
to the application's database, not to the process (two apps in one process count apart)."""

from __future__ import annotations

import re
from collections.abc import Callable

from akka_training.testing.app import InProcessTrainer
from tests.server.routers.helpers import chat_rows, register, sft_plan

FAILURES = re.compile(
    r'^akka_optimize_training_run_failures_total\{[^}]*reason="device-oom"[^}]*\} (\S+)$',
    re.MULTILINE,
)


def device_oom_failures(trainer: InProcessTrainer) -> float:
    """The failure counter of reason device-oom in the trainer's /metrics (0 when absent)."""
    found = FAILURES.search(trainer.telemetry.metrics.prometheus_text().decode())
    return float(found.group(1)) if found else 0.0


def test_a_failed_run_is_counted_by_its_own_application_only(
    in_process_factory: Callable[..., InProcessTrainer],
) -> None:
    settings = {"trainer": {"projects": [{"name": "maths", "quota": 2}]}}
    failing, other = in_process_factory(settings), in_process_factory(settings)
    api = failing.client()
    register(api, "maths/train", chat_rows(12))
    run_id = api.post("/v1/runs", json=sft_plan()).json()["id"]
    launch = failing.admit(run_id)
    job = failing.job_client(launch)
    report = {"code": "device-oom", "detail": "CUDA out of memory"}
    assert job.post(f"/v1/jobs/{run_id}/attempts/{launch.attempt}/failed", json=report).is_success
    assert api.get(f"/v1/runs/{run_id}").json()["phase"] == "FAILED"

    assert (device_oom_failures(failing), device_oom_failures(other)) == (1.0, 0.0)
