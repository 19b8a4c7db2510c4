"""The API's bodies: JSON keys as the service sends them, dumps equal to what was read, unknown
keys refused by the models and kept by the client's reading, timestamps unchanged."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from akka_training.api.bundles import Bundle
from akka_training.api.capacity import Capacity
from akka_training.api.errors import ErrorBody
from akka_training.api.jobs import REPORTS, Directive
from akka_training.api.pipelines import StageCheck
from akka_training.api.rollouts import StepRollouts
from akka_training.api.runs import DeriveRequest, MemorySplit, RunRecord, RunSummary, TreeNode
from akka_training.api.system import TokenRequest
from akka_training.client.base import read_as
from akka_training.core.errors import NotFound, PlanRefused, Problem
from akka_training.core.plans import Execution, RunConfig
from akka_training.core.resolved import BaseModelPin, DatasetPin, Settings

SUMMARY: dict[str, Any] = {
    "id": "4e59a7e687ac",
    "project": "maths",
    "modelName": None,
    "description": None,
    "method": "sft",
    "engine": "trl",
    "baseModel": "tiny-chat",
    "dataset": "maths/train:v1",
    "phase": "COMPLETED",
    "phaseSince": "2026-12-02T18:50:21.512034+00:00",
    "progress": {"observedStep": 4, "totalSteps": 4, "savedStep": 2},
    "attempt": 1,
    "requested": None,
    "pool": "default",
    "gpus": 1,
    "createdAt": "2026-12-02T18:50:20+00:00",
    "startedAt": "2026-12-02T18:50:21.000001",
    "endedAt": None,
    "pipeline": None,
    "stage": None,
    "source": {"run": "0a1b2c3d4e5f", "snapshot": "step-4", "kind": "branch"},
    "failure": None,
}


def resolved_settings() -> Settings:
    return Settings(
        project="maths",
        method="sft",
        engine="trl",
        base_model=BaseModelPin(
            id="tiny-chat", path="/models/tiny-chat", revision=None, modality="text",
            context_length=2048,
        ),
        dataset=DatasetPin(
            ref="maths/train", name="maths/train", version=1, sha256="ab" * 32, rows=40,
            bytes=4250, format="chat", has_images=False, blob="datasets/sha256/abab.jsonl",
        ),
        config=RunConfig(dataset="maths/train:v1", method="sft"),
        execution=Execution(),
    )  # fmt: skip


def record(**changes: Any) -> dict[str, Any]:
    body = {
        **SUMMARY,
        "results": {"model": None, "trainingLoss": 0.2, "reward": None, "adapterModules": None},
        "dataFit": {"rows": 40, "rowsTruncated": 0, "answersTruncated": 0, "rowsDropped": 0,
                    "maxSeqLength": 256, "paddingShare": 0.25},
        "memory": {"step": 4, "host_peak": 100000004.0},
        "cost": {"gpuSeconds": 1.7, "durationSeconds": 1.2, "phaseSeconds": {"PREPARING": 0.6},
                 "tokensPerSecond": None, "mfu": None},
        "queue": None,
        "stalled": None,
        "settings": resolved_settings().to_json(),
    }  # fmt: skip
    return {**body, **changes}


def test_a_run_record_dumps_to_the_json_it_was_read_from() -> None:
    body = record()
    run = RunRecord.model_validate(body)
    assert run.to_json() == body
    assert run.progress.saved_step == 2 and run.source is not None and run.source.kind == "branch"
    assert run.data_fit is not None and run.data_fit.padding_share == 0.25
    assert run.memory is not None and run.memory.host_peak == 100000004.0


def test_keys_the_service_leaves_out_stay_out() -> None:
    fit = {"rows": 8, "rowsTruncated": 0, "answersTruncated": 0, "rowsDropped": 1,
           "maxSeqLength": 128, "promptsTruncated": 1}  # fmt: skip
    body = record(dataFit=fit, memory={"step": 2, "reserved": 2.0e9, "weights": 1.0e9})
    run = RunRecord.model_validate(body)
    assert run.to_json() == body
    assert run.data_fit is not None and run.data_fit.padding_share is None
    assert MemorySplit.model_validate({"step": 1}).to_json() == {"step": 1}
    # `existing` appears only on a resubmission, `omitted` and the like only when they apply.
    assert "existing" not in run.to_json()
    again = RunRecord.model_validate({**body, "existing": True})
    assert again.existing and again.to_json()["existing"] is True
    check = {"name": "distill", "type": "train", "omitted": "trains on the output of stage grpo"}
    assert StageCheck.model_validate(check).to_json() == check


def test_timestamps_read_and_dump_to_the_same_text() -> None:
    run = RunSummary.model_validate(SUMMARY)
    dumped = run.to_json()
    for key in ("phaseSince", "createdAt", "startedAt", "endedAt"):
        assert dumped[key] == SUMMARY[key]
    assert run.created_at.tzinfo is not None and run.started_at is not None
    assert run.started_at.tzinfo is None  # SQLite hands back naive times: kept as they came


def test_an_answer_refuses_a_key_it_does_not_declare() -> None:
    # What the service builds and FastAPI checks on the way out: an undeclared key fails there.
    body = {**SUMMARY, "priority": "high", "progress": {**SUMMARY["progress"], "eta": 12.5}}
    with pytest.raises(ValidationError) as refused:
        RunSummary.model_validate(body)
    assert {(e["loc"], e["type"]) for e in refused.value.errors()} == {
        (("priority",), "extra_forbidden"),
        (("progress", "eta"), "extra_forbidden"),
    }
    with pytest.raises(ValidationError):
        Directive.model_validate({"action": "continue", "later": True})


def test_the_client_reads_an_answer_with_keys_this_version_does_not_know() -> None:
    # A newer service may send more: the client keeps the keys and dumps them back out.
    body = {**SUMMARY, "priority": "high", "progress": {**SUMMARY["progress"], "eta": 12.5}}
    run = RunSummary.read(body)
    assert run.to_json() == body
    assert run.model_extra == {"priority": "high"}
    assert run.progress.model_extra == {"eta": 12.5}
    [listed] = read_as(list[RunSummary], [body])
    assert listed.to_json() == body


def test_a_request_refuses_an_unknown_field_by_name() -> None:
    with pytest.raises(ValidationError) as refused:
        DeriveRequest.model_validate({"snapshot": "step-2", "stepz": 3})
    assert refused.value.errors()[0]["loc"] == ("stepz",)
    assert refused.value.errors()[0]["type"] == "extra_forbidden"
    body = TokenRequest(name="ci", projects=["maths"], expires_in_days=2).to_json()
    assert body == {"name": "ci", "projects": ["maths"], "admin": False, "expiresInDays": 2}


def test_the_settings_stay_the_mapping_the_service_stored() -> None:
    settings = resolved_settings().to_json()
    # A newer service may resolve a field this version does not know: the plan models refuse
    # it, so typing the field with core.resolved.Settings would break an older client.
    newer = {**settings, "execution": {**settings["execution"], "priority": 3}}
    with pytest.raises(ValidationError):
        Settings.model_validate(newer)
    run = RunRecord.model_validate(record(settings=newer))
    assert run.settings == newer and run.to_json()["settings"] == newer


def test_reserved_words_keep_their_json_keys() -> None:
    tree = {"run": "r1", "method": "sft", "phase": "COMPLETED", "modelName": None,
            "from": None, "children": [{"run": "r2", "method": "sft", "phase": "QUEUED",
            "from": {"kind": "branch", "snapshot": "step-4"}, "modelName": "b", "children": []}]}  # fmt: skip
    node = TreeNode.model_validate(tree)
    assert node.children[0].origin is not None and node.children[0].origin.kind == "branch"
    assert node.to_json() == tree
    capacity = {
        "pools": [],
        "claims": [{"kind": "run", "for": "r1", "project": "maths", "devices": 1,
                    "pool": "default", "state": "GRANTED", "since": "2026-12-02T18:50:20+00:00",
                    "sinceSeconds": 3.5}],
        "projects": [{"project": "maths", "quota": None, "held": 1, "queued": 0}],
    }  # fmt: skip
    parsed = Capacity.model_validate(capacity)
    assert parsed.claims[0].for_ == "r1" and parsed.to_json() == capacity


def test_the_error_body_is_the_error_tree_as_json() -> None:
    refused = PlanRefused([Problem("execution.gpus", "execution.gpus: set it to 1.")])
    body = ErrorBody.of(refused)
    assert body.to_json() == refused.to_json()
    assert body.error.problems[0].field == "execution.gpus"
    rebuilt = body.exception(422)
    assert isinstance(rebuilt, PlanRefused) and rebuilt.message == refused.message
    missing = NotFound("There is no run 'abc'.")
    assert ErrorBody.of(missing).to_json() == {
        "error": {"code": "not-found", "message": "There is no run 'abc'."}
    }
    assert isinstance(ErrorBody.of(missing).exception(404), NotFound)


def test_rollouts_and_bundles_read_as_sent() -> None:
    empty: dict[str, Any] = {"run": "r1", "method": "sft", "steps": [], "step": None, "count": 0, "order": None,
             "best": None, "worst": None, "rollouts": [],
             "note": "Run r1 is a sft run: only grpo and gspo runs keep rollouts."}  # fmt: skip
    assert StepRollouts.model_validate(empty).to_json() == empty
    rollout = {"step": 1, "index": 0, "group": 0,
               "prompt": [{"role": "user", "content": "What is 1 + 1?"}], "completion": "#### 2",
               "expected": "#### 2", "score": 1.0, "shares": {"correct": 1.0},
               "values": {"correct": 1.0}, "completionTokens": 3, "finishReason": "stop",
               "toolCalls": 0, "toolFailures": 0, "failures": {}, "explanations": {},
               "weights": {"correct": 1.0}}  # fmt: skip
    kept = {**empty, "steps": [1], "step": 1, "count": 1, "order": "worst", "best": 1.0,
            "worst": 1.0, "rollouts": [rollout]}  # fmt: skip
    del kept["note"]
    page = StepRollouts.model_validate(kept)
    assert page.to_json() == kept and page.rollouts[0].completion_tokens == 3
    bundle = {"ref": "maths/score:v1", "project": "maths", "name": "score", "version": 1,
              "sha256": "cd" * 32, "bytes": 120, "files": ["score.py"],
              "createdAt": "2026-12-02T18:50:20+00:00"}  # fmt: skip
    assert Bundle.model_validate(bundle).to_json() == bundle
    assert Bundle.model_validate({**bundle, "existing": True}).existing


def test_every_report_kind_has_a_body_and_the_answer_is_a_directive() -> None:
    assert set(REPORTS) == {
        "started", "training", "steps", "snapshots", "rollouts", "heartbeat", "finished",
        "stopped", "failed", "batch",
    }  # fmt: skip
    assert Directive.model_validate({"action": "save-and-stop"}).action == "save-and-stop"
    with pytest.raises(ValidationError):
        Directive.model_validate({"action": "dance"})
