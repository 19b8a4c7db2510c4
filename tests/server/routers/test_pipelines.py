"""Pipelines through the real app: a refused pipeline lists its schema and its stages' rule
problems together."""

from __future__ import annotations

from typing import Any

import httpx

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
