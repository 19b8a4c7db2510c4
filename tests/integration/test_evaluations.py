"""Evaluations on the development models through the real service, its controller, the local
backend and the CLI: the base model and an adapter trained on the held-out arithmetic set,
scored on that set (the adapter's match score and loss are better, beyond noise), their samples
worst and best first, `evaluations compare`, and the refusals in their words."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from akka_training.testing.service import TrainerProcess
from akka_training.testing.waiting import until
from tests.integration.helpers import ensure_project, register_dataset, write_plan
from tests.integration.test_training import EXAMPLES, IMAGE_ROWS

pytestmark = pytest.mark.slow

METRICS = [
    {"name": "correct", "kind": "match", "mode": "exact"},
    {"name": "format", "kind": "regex", "pattern": "^#### [0-9]+$"},
    {"kind": "loss"},
]


@pytest.fixture(scope="module")
def trainer(tmp_path_factory: pytest.TempPathFactory, dev_models: Path) -> Any:
    t = TrainerProcess(
        tmp_path_factory.mktemp("evaluations"),
        {"trainer": {"dev-models-dir": str(dev_models), "controller": {"interval-seconds": 0.2}}},
    ).start()
    ensure_project(t, "demo")
    ensure_project(t, "other")
    t.cli(
        "training",
        "datasets",
        "register",
        "demo/arithmetic-eval",
        "-f",
        str(EXAMPLES / "arithmetic-eval.jsonl"),
    )
    register_dataset(t, "demo/pictures", IMAGE_ROWS)
    yield t
    t.close()


def evaluation_plan(**extra: Any) -> dict[str, Any]:
    return {
        "kind": "evaluation",
        "project": "demo",
        "baseModel": "tiny-chat",
        "dataset": "demo/arithmetic-eval",
        "generation": {"maxCompletionTokens": 8, "temperature": 0},
        "metrics": METRICS,
        **extra,
    }


@pytest.fixture(scope="module")
def trained(trainer: TrainerProcess) -> str:
    """A run that learns the held-out set by heart (SFT on it), so that its adapter scores."""
    plan = {
        "kind": "run",
        "project": "demo",
        "baseModel": "tiny-chat",
        "config": {
            "dataset": "demo/arithmetic-eval",
            "method": "sft",
            "maxSeqLength": 128,
            "hyperparams": {
                "optimizer": {"learningRate": 1e-2},
                "training": {"maxSteps": 60, "batchSize": 8},
            },
        },
        "execution": {"saveEvery": 30},
    }
    path = write_plan(trainer, plan, "plan-sft.yaml")
    run_id: str = trainer.cli_json("training", "runs", "start", "-f", str(path))["id"]
    trainer.cli("training", "runs", "wait", run_id, timeout=600)
    run = trainer.cli_json("training", "runs", "get", run_id)
    assert run["phase"] == "COMPLETED", run["failure"]
    return run_id


def evaluate(trainer: TrainerProcess, plan: dict[str, Any], name: str) -> dict[str, Any]:
    path = write_plan(trainer, plan, f"plan-{name}.yaml")
    evaluation_id = trainer.cli_json("training", "evaluations", "start", "-f", str(path))["id"]
    trainer.cli("training", "evaluations", "wait", evaluation_id, "--exit-status", timeout=600)
    record: dict[str, Any] = trainer.cli_json("training", "evaluations", "get", evaluation_id)
    return record


def metric(record: dict[str, Any], name: str) -> dict[str, Any]:
    found: dict[str, Any] = next(m for m in record["metrics"] if m["name"] == name)
    return found


def test_the_adapter_scores_higher_than_the_base_model(
    trainer: TrainerProcess, trained: str
) -> None:
    base = evaluate(trainer, evaluation_plan(name="base"), "base")
    tuned = evaluate(trainer, evaluation_plan(name="tuned", source={"run": trained}), "tuned")

    assert base["state"] == tuned["state"] == "SUCCEEDED"
    assert base["source"] is None and tuned["source"] == {"run": trained, "snapshot": None}
    assert tuned["sampleCount"] == tuned["prompts"] == 8
    # The deployment names no vLLM environment: `auto` generated with transformers.
    assert base["engine"] == tuned["engine"] == "transformers"
    for record in (base, tuned):
        for m in record["metrics"]:
            assert m["low"] <= m["mean"] <= m["high"], m
    assert metric(tuned, "correct")["mean"] > metric(base, "correct")["mean"]
    assert metric(tuned, "loss")["mean"] < metric(base, "loss")["mean"]
    assert metric(tuned, "correct")["count"] == 8 and metric(tuned, "loss")["count"] == 8

    compared = trainer.cli_json("training", "evaluations", "compare", base["id"], tuned["id"])
    by_name = {m["name"]: m for m in compared["metrics"]}
    assert by_name["correct"]["difference"] == pytest.approx(
        metric(tuned, "correct")["mean"] - metric(base, "correct")["mean"]
    )
    assert by_name["loss"]["beyondNoise"] is True
    text = trainer.cli("training", "evaluations", "compare", base["id"], tuned["id"]).stdout
    assert "BEYOND NOISE" in text and "correct" in text and "loss" in text

    worst = trainer.cli_json("training", "evaluations", "results", tuned["id"], "--limit", "8")
    best = trainer.cli_json(
        "training", "evaluations", "results", tuned["id"], "--best", "--limit", "8"
    )
    assert worst["total"] == 8 and len(worst["samples"]) == 8
    scores = [s["score"] for s in worst["samples"]]
    assert scores == sorted(scores)
    assert [s["score"] for s in best["samples"]] == sorted(scores, reverse=True)
    sample = best["samples"][0]
    assert sample["expected"].startswith("#### ") and sample["values"]["correct"] == 1.0

    listed = trainer.cli_json("training", "evaluations", "list", "--project", "demo")
    assert {base["id"], tuned["id"]} <= {e["id"] for e in listed}
    shown = trainer.cli("training", "evaluations", "get", tuned["id"]).stdout
    assert "Metrics (95% confidence interval)" in shown and "correct" in shown


def test_pass_at_k_over_several_samples(trainer: TrainerProcess, trained: str) -> None:
    plan = evaluation_plan(
        source={"run": trained},
        generation={"maxCompletionTokens": 8, "temperature": 1.0, "samplesPerPrompt": 4},
        metrics=[
            {"name": "correct", "kind": "match"},
            {"name": "pass", "kind": "pass@k", "term": "correct", "k": 4},
        ],
    )
    record = evaluate(trainer, plan, "pass")
    assert record["sampleCount"] == 32
    passed = metric(record, "pass")
    assert passed["count"] == 8 and passed["mean"] >= metric(record, "correct")["mean"]


def refusal(trainer: TrainerProcess, plan: dict[str, Any], name: str) -> str:
    path = write_plan(trainer, plan, f"plan-{name}.yaml")
    result = trainer.cli("training", "evaluations", "start", "-f", str(path), check=False)
    assert result.returncode == 1, result.stdout
    return result.stderr


def test_refusals_name_what_to_change(trainer: TrainerProcess, trained: str) -> None:
    unknown = refusal(trainer, evaluation_plan(metrics=[{"name": "b", "kind": "bleu"}]), "bleu")
    assert (
        "metrics[0]: there is no metric 'bleu'; set kind to one of: match, regex, length, "
        "judge, http, rule, loss, pass@k, preference." in unknown
    )

    images = refusal(trainer, evaluation_plan(dataset="demo/pictures"), "images")
    assert (
        "Dataset demo/pictures:v1 holds images, and base model tiny-chat reads text only; "
        "evaluate it on a dataset without images, or choose an image-text base model." in images
    )

    other = refusal(trainer, evaluation_plan(project="other", source={"run": trained}), "other")
    assert (
        f"Run {trained} belongs to project demo, not other; evaluate it in its own project "
        "(project: demo)." in other
    )

    single = refusal(
        trainer,
        evaluation_plan(metrics=[{"name": "c", "kind": "match"}, {"kind": "pass@k", "term": "c"}]),
        "single",
    )
    assert (
        "pass@k needs more than one sample of each prompt; set generation.samplesPerPrompt "
        "above 1 (it is 1)." in single
    )

    checked = trainer.cli(
        "training",
        "evaluations",
        "start",
        "-f",
        str(write_plan(trainer, evaluation_plan(source={"run": trained}), "plan-dry.yaml")),
        "--dry-run",
        "--show-resolved",
    ).stdout
    assert "adapter: runs/" in checked and "datasetRef: demo/arithmetic-eval:v1" in checked
    assert trainer.cli_json("training", "evaluations", "list", "--project", "other") == []


def test_a_pipeline_whose_gate_fails_stops_before_its_next_stage(trainer: TrainerProcess) -> None:
    train = {
        "baseModel": "tiny-chat",
        "config": {
            "dataset": "demo/arithmetic-eval",
            "method": "sft",
            "maxSeqLength": 128,
            "hyperparams": {"training": {"maxSteps": 2, "batchSize": 4}},
        },
    }
    plan = {
        "kind": "pipeline",
        "project": "demo",
        "stages": [
            {"name": "learn", **train},
            {
                "name": "check",
                "type": "evaluate",
                "source": "@learn",
                "dataset": "demo/arithmetic-eval",
                "generation": {"maxCompletionTokens": 8},
                "metrics": [{"name": "correct", "kind": "match"}],
                "gate": {"metric": "correct", "min": 1.5},
            },
            {"name": "more", "source": {"run": "@learn"}, **train},
        ],
    }
    path = write_plan(trainer, plan, "plan-gate.yaml")
    resolved = trainer.cli(
        "training", "pipelines", "start", "-f", str(path), "--dry-run", "--show-resolved"
    ).stdout
    assert "Stage check:" in resolved and "datasetRef: demo/arithmetic-eval:v1" in resolved
    assert "@learn (the final adapter of stage learn" in resolved

    pipeline_id = trainer.cli_json("training", "pipelines", "start", "-f", str(path))["id"]
    trainer.cli("training", "pipelines", "wait", pipeline_id, check=False, timeout=600)
    pipeline = trainer.cli_json("training", "pipelines", "get", pipeline_id)
    assert pipeline["state"] == "FAILED", pipeline
    stages = {s["name"]: s for s in pipeline["stages"]}
    assert stages["learn"]["phase"] == "COMPLETED"
    assert stages["check"]["phase"] == "SUCCEEDED" and stages["check"]["run"].startswith("ev")
    assert stages["more"]["phase"] == "NOT_STARTED" and stages["more"]["run"] is None
    evaluation = trainer.cli_json("training", "evaluations", "get", stages["check"]["run"])
    value = metric(evaluation, "correct")["mean"]
    assert pipeline["failure"] == (
        f"stage check (evaluation {evaluation['id']}): the gate did not pass: metric correct "
        f"is {value:.4g}, below the minimum 1.5. Resuming the pipeline runs the same evaluation "
        "of the same adapter (stage learn) and fails again: start a new pipeline with that stage "
        "changed, or with a lower gate.min"
    )


def test_an_evaluate_stage_must_name_an_earlier_train_stage(trainer: TrainerProcess) -> None:
    plan = {
        "kind": "pipeline",
        "project": "demo",
        "stages": [
            {
                "name": "check",
                "type": "evaluate",
                "source": "@nothing",
                "dataset": "demo/arithmetic-eval",
                "metrics": [{"name": "correct", "kind": "match"}],
                "gate": {"metric": "correct", "min": 0.5},
            }
        ],
    }
    path = write_plan(trainer, plan, "plan-bad-gate.yaml")
    result = trainer.cli("training", "pipelines", "start", "-f", str(path), check=False)
    assert result.returncode == 1
    assert (
        "stage check: source '@nothing' names no earlier train stage; set it to @STAGE, one "
        "of: none." in result.stderr
    )


def test_an_evaluation_waits_for_the_device_a_run_holds(trainer: TrainerProcess) -> None:
    """The host's one device: a run holds it, the evaluation waits QUEUED and says why, and
    runs once the run is cancelled; afterwards no claim is left open."""
    run_plan = {
        "kind": "run",
        "project": "demo",
        "baseModel": "tiny-chat",
        "config": {
            "dataset": "demo/arithmetic-eval",
            "method": "sft",
            "maxSeqLength": 128,
            "hyperparams": {"training": {"maxSteps": 100000, "batchSize": 1}},
        },
    }
    path = write_plan(trainer, run_plan, "plan-holder.yaml")
    run_id = trainer.cli_json("training", "runs", "start", "-f", str(path))["id"]
    plan = evaluation_plan(name="waiting", metrics=[{"name": "correct", "kind": "match"}])
    eval_path = write_plan(trainer, plan, "plan-waiting.yaml")
    evaluation_id = trainer.cli_json("training", "evaluations", "start", "-f", str(eval_path))["id"]
    waiting = trainer.cli_json("training", "evaluations", "get", evaluation_id)
    assert (waiting["state"], waiting["claim"]) == ("PENDING", "QUEUED")
    assert "devices: needs 1, pool default has 0 free" in waiting["queue"]["waitingFor"]
    shown = trainer.cli("training", "evaluations", "get", evaluation_id).stdout
    assert "Waiting for" in shown and "devices: needs 1, pool default has 0 free" in shown
    capacity = trainer.cli_json("training", "capacity")
    assert [(c["kind"], c["for"], c["state"]) for c in capacity["claims"]] == [
        ("run", run_id, "GRANTED"),
        ("evaluation", evaluation_id, "QUEUED"),
    ]

    trainer.cli("training", "runs", "cancel", run_id)
    trainer.cli("training", "evaluations", "wait", evaluation_id, "--exit-status", timeout=600)
    done = trainer.cli_json("training", "evaluations", "get", evaluation_id)
    assert (done["state"], done["sampleCount"]) == ("SUCCEEDED", 8)
    trainer.cli("training", "runs", "wait", run_id, timeout=120)
    # The evaluation's job exits after its report: its device goes back once it is gone.
    until(
        lambda: trainer.cli_json("training", "capacity")["claims"] == [],
        what="the evaluation's claim to go",
        timeout=60,
        interval=0.1,
    )
    assert trainer.cli_json("training", "evaluations", "get", evaluation_id)["claim"] is None
