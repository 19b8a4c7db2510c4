"""Pipelines through the real app: a refused pipeline lists its schema and its stages' rule
problems together."""

from __future__ import annotations

from typing import Any

import httpx

from akka_training.core.evaluations import EvaluationResult, MetricValue
from akka_training.core.plans import EvaluateStage, PipelinePlan
from akka_training.core.states import PipelineRule
from akka_training.server.services.stage_evaluations import gate_failure
from akka_training.storage.models import Pipeline, Task
from akka_training.storage.transitions.pipelines import move_pipeline
from akka_training.testing.app import InProcessTrainer
from tests.server.routers.helpers import chat_rows, register, sft_plan


def test_a_pipeline_reports_an_unknown_field_and_its_stages_rule_problems_together(
    api: httpx.Client,
) -> None:
    stage = _registered_stage(api)
    plan = {
        "kind": "pipeline",
        "project": "maths",
        "stages": [
            {**stage, "name": "one", "type": "train", "colour": "blue"},
            {**stage, "name": "two", "type": "train", "execution": {"gpus": 2}},
        ],
    }
    answered = api.post("/v1/pipelines", params={"dry_run": "true"}, json=plan)
    assert answered.status_code == 422
    error = answered.json()["error"]
    assert [p["field"] for p in error["problems"]] == [
        "stages[0].colour",
        "stages[1].execution.gpus",
    ]
    assert error["problems"][1]["message"] == (
        "stage two: No envelope in this deployment's catalog runs sft on tiny-chat at 2 GPU(s) "
        "under trl: it is qualified at 1 GPU(s). Set execution.gpus to one of these."
    )
    assert error["message"].startswith("The pipeline was refused (2 problems):")


def test_a_stage_that_is_no_mapping_is_refused_with_the_others(api: httpx.Client) -> None:
    stage = _registered_stage(api)
    plan = {
        "kind": "pipeline",
        "project": "maths",
        "stages": [
            {**stage, "name": "one", "type": "tune"},
            [{**stage, "name": "two", "type": "train"}],  # a stage written as a list
            "three",
        ],
    }
    answered = api.post("/v1/pipelines", params={"dry_run": "true"}, json=plan)
    assert answered.status_code == 422, answered.text
    assert [(p["field"], p["message"]) for p in answered.json()["error"]["problems"]] == [
        ("stages[0]", "stages[0].type must be train or evaluate."),
        (
            "stages[1]",
            "stages[1] is not a stage: write each stage as a mapping (name, type, ...), "
            "not a list.",
        ),
        (
            "stages[2]",
            "stages[2] is not a stage: write each stage as a mapping (name, type, ...), not a str.",
        ),
    ]


def _registered_stage(api: httpx.Client) -> dict[str, Any]:
    """The fields of an sft plan a stage holds, over a registered maths/train."""
    register(api, "maths/train", chat_rows(12))
    return {k: v for k, v in sft_plan().items() if k not in ("kind", "project")}


def _gated_plan(api: httpx.Client) -> dict[str, Any]:
    stage = _registered_stage(api)
    return {
        "kind": "pipeline",
        "project": "maths",
        "stages": [
            {**stage, "name": "learn", "type": "train"},
            {
                "name": "check",
                "type": "evaluate",
                "source": "@learn",
                "dataset": "maths/train",
                "generation": {"maxCompletionTokens": 8},
                "metrics": [{"name": "correct", "kind": "match"}],
                "gate": {"metric": "correct", "min": 0.6},
            },
            {**stage, "name": "more", "type": "train"},
        ],
    }


def test_the_resolved_evaluate_stage_shows_its_gate(api: httpx.Client) -> None:
    answered = api.post("/v1/pipelines", params={"dry_run": "true"}, json=_gated_plan(api))
    assert answered.status_code == 200, answered.text
    check = answered.json()["stages"][1]
    assert check["name"] == "check"
    assert check["settings"]["gate"] == {"metric": "correct", "min": 0.6}


def test_stages_after_a_pipeline_failed_read_as_not_started(
    api: httpx.Client, trainer: InProcessTrainer
) -> None:
    answered = api.post("/v1/pipelines", json=_gated_plan(api))
    assert answered.status_code in (200, 201), answered.text
    pipeline_id = answered.json()["id"]
    running = api.get(f"/v1/pipelines/{pipeline_id}").json()
    assert [s["phase"] for s in running["stages"]][1:] == ["WAITING", "WAITING"]

    with trainer.ctx.db.session() as session:
        row = session.get(Pipeline, pipeline_id)
        assert row is not None
        move_pipeline(session, row, PipelineRule.FAIL, failure="stage learn failed")
    ended = api.get(f"/v1/pipelines/{pipeline_id}").json()
    assert ended["state"] == "FAILED"
    assert [(s["name"], s["run"], s["phase"]) for s in ended["stages"]][1:] == [
        ("check", None, "NOT_STARTED"),
        ("more", None, "NOT_STARTED"),
    ]


def test_a_failed_gate_says_that_resuming_fails_again_and_what_to_change() -> None:
    plan = PipelinePlan.model_validate(
        {
            "kind": "pipeline",
            "project": "maths",
            "stages": [
                {
                    "name": "learn",
                    "type": "train",
                    **{k: v for k, v in sft_plan().items() if k not in ("kind", "project")},
                },
                {
                    "name": "check",
                    "type": "evaluate",
                    "source": "@learn",
                    "dataset": "maths/held-out",
                    "metrics": [{"name": "correct", "kind": "match"}],
                    "gate": {"metric": "correct", "min": 0.6},
                },
            ],
        }
    )
    stage = plan.stages[1]
    assert isinstance(stage, EvaluateStage)
    value = MetricValue(
        name="correct", kind="match", mean=0.25, low=0.1, high=0.5, stderr=0.1, count=8
    )
    result = EvaluationResult(metrics=[value], samples="s.jsonl", sample_count=8, prompts=8)
    task = Task(id="ev-1", result=result.model_dump(mode="json", by_alias=True))
    assert gate_failure(stage, task) == (
        "stage check (evaluation ev-1): the gate did not pass: metric correct is 0.25, below "
        "the minimum 0.6. Resuming the pipeline runs the same evaluation of the same adapter "
        "(stage learn) and fails again: start a new pipeline with that stage changed, or with "
        "a lower gate.min"
    )
