"""`runs verify` through the real app: the verify task takes only the steps whose report and
rollouts are both in (a run still training has a newest step with one and not the other), with
the figures each published; the refusals in their words."""

from __future__ import annotations

from typing import Any

import httpx
from sqlalchemy import select

from akka_training.rewards.rollouts import Rollout, step_file_bytes
from akka_training.storage.models import Task
from akka_training.testing.app import InProcessTrainer
from tests.server.routers.helpers import answer, chat_rows, error, grpo_plan, register, sft_plan


def a_rollout(step: int) -> Rollout:
    return Rollout(
        step=step,
        index=0,
        group=0,
        prompt="What is 1 + 1?",
        completion="#### 2",
        expected="#### 2",
        score=1.0,
        shares={"correct": 1.0},
        values={"correct": 1.0},
        completion_tokens=3,
        finish_reason="stop",
        weights={"correct": 1.0},
    )


def test_only_steps_with_report_and_rollouts_both_in_are_verified(
    api: httpx.Client, trainer: InProcessTrainer
) -> None:
    register(api, "maths/train", chat_rows(12))
    run_id = api.post("/v1/runs", json=grpo_plan()).json()["id"]
    launch = trainer.admit(run_id)
    job = trainer.job_client(launch)
    base = f"/v1/jobs/{run_id}/attempts/{launch.attempt}"
    assert job.post(f"{base}/started", json={"placement": {"host": "h", "pid": 1}}).is_success

    def rollouts(step: int) -> dict[str, Any]:
        key = f"runs/{run_id}/rollouts/step-{step}.parquet"
        trainer.ctx.blobs.put_bytes(key, step_file_bytes([a_rollout(step)]))
        body = {"step": step, "blob": key, "count": 1, "bestScore": 1.0, "worstScore": 1.0}
        return {"kind": "rollouts", "body": body}

    def step(number: int, metrics: dict[str, Any]) -> dict[str, Any]:
        return {"kind": "steps", "body": {"step": number, "metrics": metrics}}

    reports = [
        step(1, {"reward/mean": 1.0, "loss": 0.5}),
        rollouts(1),
        step(2, {"reward/mean": 0.5}),  # its rollouts not stored yet
    ]
    assert job.post(f"{base}/batch", json={"reports": reports}).is_success

    response = api.post(f"/v1/runs/{run_id}/verifications")

    assert response.status_code == 201, response.text
    task = response.json()
    assert (task["kind"], task["run"], task["state"]) == ("verify", run_id, "PENDING")
    with trainer.ctx.db.session() as session:
        params = session.scalars(select(Task.params).where(Task.id == task["id"])).one()
    assert params["steps"] == [
        {
            "step": 1,
            "attempt": launch.attempt,
            "blob": f"runs/{run_id}/rollouts/step-1.parquet",
            "published": {"reward/mean": 1.0, "loss": 0.5},
        }
    ]
    assert params["reward"]["terms"] == [
        {"name": "correct", "weight": 1.0, "kind": "match", "mode": "exact"}
    ]
    assert (params["correctnessTerm"], params["baselineSteps"]) == ("correct", 3)


def test_verify_refuses_an_sft_run_and_a_run_with_no_step_in(
    api: httpx.Client, trainer: InProcessTrainer
) -> None:
    register(api, "maths/train", chat_rows(12))
    sft = api.post("/v1/runs", json=sft_plan()).json()["id"]
    grpo = api.post("/v1/runs", json=grpo_plan()).json()["id"]

    assert answer(api.post(f"/v1/runs/{sft}/verifications")) == (
        400,
        error(
            "invalid",
            f"Run {sft} is a sft run: only grpo and gspo runs keep rollouts to verify their "
            "figures against.",
        ),
    )
    assert answer(api.post(f"/v1/runs/{grpo}/verifications")) == (
        409,
        error(
            "conflict",
            f"Run {grpo} has no step whose report and rollouts are both in yet, so there is "
            "nothing to verify: wait for its first step.",
        ),
    )
