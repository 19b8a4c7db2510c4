"""The client's typed answers are the service's JSON: for every read, a model dumped with
``to_json()`` equals the raw answer, and the models know every key the service sends. A real
trainer, real scripted jobs, the real CLI."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from pydantic import BaseModel

from akka_training.api.runs import RunEndLine, RunEventLine, RunRecord, StepFigures
from akka_training.core.errors import NotFound, PlanRefused
from akka_training.testing.service import TrainerProcess
from akka_training.testing.waiting import until
from tests.integration.helpers import (
    ensure_project,
    register_dataset,
    scripted_settings,
    sft_plan,
    start_run,
    wait_phase,
    write_plan,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def trainer(tmp_path_factory: pytest.TempPathFactory) -> Any:
    t = TrainerProcess(
        tmp_path_factory.mktemp("typed"),
        scripted_settings(),
        env={"AKKA_SCRIPTED_STEP_SECONDS": "0.05"},
    ).start()
    ensure_project(t, "maths", quota=2)
    register_dataset(t, "maths/train")
    t.cli("training", "datasets", "alias", "maths/train:v1", "prod")
    yield t
    t.close()
    assert "Traceback" not in t.log()


@pytest.fixture(scope="module")
def run_id(trainer: TrainerProcess) -> str:
    run = start_run(trainer, sft_plan("maths", "maths/train", steps=4))
    wait_phase(trainer, run, "COMPLETED")
    # The claim goes once the job is gone: wait, so that every read below sees one state.
    with trainer.client() as client:
        until(lambda: not client.capacity().claims, what="the run's claim to go", timeout=30)
    return run


def raw(trainer: TrainerProcess, path: str, **params: Any) -> Any:
    headers = {"Authorization": f"Bearer {trainer.admin_token}"}
    response = httpx.get(trainer.url + path, params=params, headers=headers, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()


def dumped(answer: Any) -> Any:
    return [a.to_json() for a in answer] if isinstance(answer, list) else answer.to_json()


def unknown_keys(answer: Any, where: str = "") -> list[str]:
    """Keys of the answer that no model declares (StepFigures keeps its figures as extras)."""
    if isinstance(answer, list):
        return [k for i, item in enumerate(answer) for k in unknown_keys(item, f"{where}[{i}]")]
    if not isinstance(answer, BaseModel):
        return []
    found = (
        []
        if isinstance(answer, StepFigures)
        else [f"{where}.{k}" for k in answer.model_extra or {}]
    )
    for name in type(answer).model_fields:
        found += unknown_keys(getattr(answer, name), f"{where}.{name}")
    return found


def test_every_read_is_the_json_the_service_sent(trainer: TrainerProcess, run_id: str) -> None:
    with trainer.client() as client:
        reads: list[tuple[Any, str, dict[str, Any]]] = [
            (client.health(), "/healthz", {}),
            (client.info(), "/v1/info", {}),
            (client.whoami(), "/v1/auth/whoami", {}),
            (client.tokens(), "/v1/tokens", {}),
            (client.projects(), "/v1/projects", {}),
            (client.project("maths"), "/v1/projects/maths", {}),
            (client.base_models(), "/v1/base-models", {}),
            (client.base_model("tiny-chat"), "/v1/base-models/tiny-chat", {}),
            (client.envelopes(), "/v1/envelopes", {}),
            (client.capacity(), "/v1/capacity", {}),
            (client.datasets(), "/v1/datasets", {}),
            (client.dataset("maths/train:prod"), "/v1/datasets/maths/train:prod", {}),
            (client.dataset_versions("maths/train"), "/v1/datasets/maths/train/versions", {}),
            (client.runs(), "/v1/runs", {}),
            (client.run(run_id), f"/v1/runs/{run_id}", {}),
            (client.snapshots(run_id), f"/v1/runs/{run_id}/snapshots", {}),
            (client.metrics(run_id), f"/v1/runs/{run_id}/metrics", {}),
            (client.tree(run_id), f"/v1/runs/{run_id}/tree", {}),
            (client.logs(run_id), f"/v1/runs/{run_id}/logs", {}),
            (client.rollouts(run_id), f"/v1/runs/{run_id}/rollouts", {}),
            (client.bundles(), "/v1/bundles", {}),
            (client.pipelines(), "/v1/pipelines", {}),
        ]
        for answer, path, params in reads:
            assert dumped(answer) == raw(trainer, path, **params), path
            assert unknown_keys(answer) == [], path
        # The document the service serves is the one its routes declare.
        served = raw(trainer, "/openapi.json")
        assert served["components"]["schemas"]["RunWaitLine"]["discriminator"]
        assert "401" in served["paths"]["/v1/runs/{run_ref}"]["get"]["responses"]
        metrics = client.metrics(run_id)
        assert [s.step for s in metrics.steps] == [1, 2, 3, 4]
        assert "loss" in metrics.steps[0].figures


def test_the_cli_prints_the_same_json(trainer: TrainerProcess, run_id: str) -> None:
    with trainer.client() as client:
        assert trainer.cli_json("training", "runs", "get", run_id) == client.run(run_id).to_json()
        assert trainer.cli_json("training", "capacity") == client.capacity().to_json()
        listed = trainer.cli_json("training", "datasets", "list")
        assert listed == [d.to_json() for d in client.datasets()]


def test_starting_waiting_and_steering_answer_with_models(trainer: TrainerProcess) -> None:
    plan = sft_plan("maths", "maths/train", steps=3, submissionId="typed-1")
    with trainer.client() as client:
        checked = client.start_run(plan, dry_run=True)
        assert checked.dry_run and checked.settings["dataset"]["version"] == 1
        run = client.start_run(plan)
        assert isinstance(run, RunRecord) and not run.existing
        again = client.start_run(plan)
        assert again.existing and again.id == run.id and "existing" in again.to_json()
        lines = list(client.wait_run(run.id))
        assert isinstance(lines[-1], RunEndLine) and lines[-1].run.phase == "COMPLETED"
        events = [line for line in lines if isinstance(line, RunEventLine)]
        assert [e.data["to"] for e in events if e.kind == "phase" and e.data] == [
            "PREPARING",
            "TRAINING",
            "COMPLETED",
        ]
        branched = client.branch_run(run.id, "step-2", steps=2)
        assert branched.source is not None and branched.source.kind == "branch"
        paused = client.pause_run(branched.id, "latest")
        assert paused.phase in ("PAUSING", "PAUSED", "COMPLETED")
        with pytest.raises(NotFound):
            client.branch_run(run.id, "step-9")
        with pytest.raises(PlanRefused) as refused:
            client.start_run({**plan, "execution": {"gpus": 0}}, dry_run=True)
        assert refused.value.problems[0].field == "execution.gpus"


def test_wait_lines_are_the_streamed_json(trainer: TrainerProcess, run_id: str) -> None:
    headers = {"Authorization": f"Bearer {trainer.admin_token}"}
    with httpx.stream(
        "GET", f"{trainer.url}/v1/runs/{run_id}/wait", headers=headers, timeout=30
    ) as response:
        sent = [json.loads(line) for line in response.iter_lines() if line.strip()]
    with trainer.client() as client:
        typed = [line.to_json() for line in client.wait_run(run_id)]
    assert typed == sent
    printed = trainer.cli("training", "runs", "wait", run_id, "-o", "json").stdout
    assert [json.loads(line) for line in printed.splitlines()] == sent


def test_pipelines_answer_with_models(trainer: TrainerProcess) -> None:
    stage = sft_plan("maths", "maths/train", steps=2)
    pipeline = {
        "kind": "pipeline",
        "project": "maths",
        "name": "two",
        "stages": [
            {"name": "first", "type": "train", "baseModel": "tiny-chat", "config": stage["config"]},
            {
                "name": "second",
                "type": "train",
                "baseModel": "tiny-chat",
                "source": {"run": "@first"},
                "config": stage["config"],
            },
        ],
    }
    with trainer.client() as client:
        checked = client.start_pipeline(pipeline, dry_run=True)
        assert [s.name for s in checked.stages] == ["first", "second"]
        assert checked.stages[1].source_stage == "first"
        started = client.start_pipeline(pipeline)
        ended = list(client.wait_pipeline(started.id))[-1]
        assert ended.type == "pipeline" and ended.pipeline.state == "COMPLETED"
        assert client.pipeline(started.id).to_json() == raw(trainer, f"/v1/pipelines/{started.id}")
    path = write_plan(trainer, pipeline, "pipeline.yaml")
    shown = trainer.cli_json("training", "pipelines", "start", "-f", str(path), "--dry-run")
    assert shown == checked.to_json()


def test_a_body_with_an_unknown_field_is_refused_by_name(
    trainer: TrainerProcess, run_id: str
) -> None:
    headers = {"Authorization": f"Bearer {trainer.admin_token}"}
    response = httpx.post(
        f"{trainer.url}/v1/runs/{run_id}/pause",
        json={"checkpoint": "save", "chekpoint": "latest"},
        headers=headers,
        timeout=30,
    )
    assert response.status_code == 400
    problem = "chekpoint is not a known field; remove it or check its spelling."
    assert response.json() == {
        "error": {
            "code": "invalid",
            "message": f"The request is not valid:\n  - {problem}",
            "problems": [{"field": "chekpoint", "message": problem}],
        }
    }
