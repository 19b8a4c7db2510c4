"""Preference fine-tuning through the real service and CLI: a dpo run warm-started from an sft
run, what `runs get` and `runs metrics` show of it, a preference evaluation of both, and the
example pipeline sft -> dpo -> evaluate with its gate."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from akka_training.testing.service import TrainerProcess
from tests.integration.helpers import ensure_project, write_plan

# Every test here trains for real in a trainer process.
pytestmark = pytest.mark.slow

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(scope="module")
def trainer(tmp_path_factory: pytest.TempPathFactory, dev_models: Path) -> Any:
    t = TrainerProcess(
        tmp_path_factory.mktemp("preference"),
        {"trainer": {"dev-models-dir": str(dev_models), "controller": {"interval-seconds": 0.2}}},
    ).start()
    ensure_project(t, "demo")
    for name in (
        "arithmetic",
        "arithmetic-eval",
        "arithmetic-preference",
        "arithmetic-preference-eval",
    ):
        path = EXAMPLES / "data" / f"{name}.jsonl"
        t.cli("training", "datasets", "register", f"demo/{name}", "-f", str(path))
    yield t
    t.close()


def run_to_end(trainer: TrainerProcess, plan: dict[str, Any], name: str) -> dict[str, Any]:
    path = write_plan(trainer, plan, f"plan-{name}.yaml")
    run_id = trainer.cli_json("training", "runs", "start", "-f", str(path))["id"]
    trainer.cli("training", "runs", "wait", run_id, "--exit-status", timeout=600)
    return dict(trainer.cli_json("training", "runs", "get", run_id))


def evaluate(trainer: TrainerProcess, run_id: str) -> dict[str, Any]:
    plan = {
        "kind": "evaluation",
        "project": "demo",
        "baseModel": "tiny-chat",
        "source": {"run": run_id},
        "dataset": "demo/arithmetic-preference-eval",
        "metrics": [{"kind": "preference"}],
    }
    path = write_plan(trainer, plan, f"evaluation-{run_id}.yaml")
    evaluation_id = trainer.cli_json("training", "evaluations", "start", "-f", str(path))["id"]
    trainer.cli("training", "evaluations", "wait", evaluation_id, "--exit-status", timeout=600)
    record: dict[str, Any] = trainer.cli_json("training", "evaluations", "get", evaluation_id)
    return record


def test_sft_then_dpo_then_a_preference_evaluation(trainer: TrainerProcess) -> None:
    got = trainer.cli_json("training", "datasets", "get", "demo/arithmetic-preference")
    assert got["format"] == "preference"
    sft = yaml.safe_load((EXAMPLES / "sft.yaml").read_text())
    sft["config"].pop("evalDataset")
    sft["config"]["hyperparams"]["training"] = {"maxSteps": 6, "batchSize": 16}
    sft_run = run_to_end(trainer, sft, "sft")
    dpo = yaml.safe_load((EXAMPLES / "dpo.yaml").read_text().replace("SFT_RUN_ID", sft_run["id"]))
    dpo["config"].pop("evalDataset")
    dpo["config"]["hyperparams"]["training"] = {"maxSteps": 6, "batchSize": 8}
    dpo["config"]["hyperparams"]["optimizer"] = {"learningRate": 5e-3}
    run = run_to_end(trainer, dpo, "dpo")

    assert (run["phase"], run["method"], run["engine"]) == ("COMPLETED", "dpo", "trl")
    assert run["source"]["kind"] == "warm-start"
    assert run["preference"]["step"] == 6
    assert set(run["preference"]) == {
        "step",
        "rewardsChosen",
        "rewardsRejected",
        "rewardsMargins",
        "rewardsAccuracies",
        "logpsChosen",
        "logpsRejected",
    }
    assert run["dataFit"]["rows"] == 100 and run["dataFit"]["rowsDropped"] == 0
    out = trainer.cli("training", "runs", "get", run["id"]).stdout
    assert "Preference:" in out and "Pairs ranked right" in out
    steps = trainer.cli_json("training", "runs", "metrics", run["id"], "--fields", "rewards")
    first = steps["steps"][0]
    # The SFT adapter is the policy and the reference at the first step: rewards are 0.
    assert (first["rewards/chosen"], first["rewards/rejected"]) == (0.0, 0.0)

    shares = {name: evaluate(trainer, r["id"]) for name, r in (("sft", sft_run), ("dpo", run))}
    for record in shares.values():
        (value,) = record["metrics"]
        assert value["kind"] == "preference" and value["count"] == 8
        assert value["low"] <= value["mean"] <= value["high"]


def test_the_example_pipeline_runs_sft_then_dpo_then_its_gated_evaluation(
    trainer: TrainerProcess,
) -> None:
    plan = yaml.safe_load((EXAMPLES / "pipeline-dpo.yaml").read_text())
    # Fewer steps than the example, the same stages.
    plan["stages"][0]["config"]["hyperparams"]["training"] = {"maxSteps": 6, "batchSize": 16}
    plan["stages"][1]["config"]["hyperparams"]["training"] = {"maxSteps": 4, "batchSize": 8}
    path = write_plan(trainer, plan, "pipeline-dpo.yaml")
    pipeline_id = trainer.cli_json("training", "pipelines", "start", "-f", str(path))["id"]
    trainer.cli("training", "pipelines", "wait", pipeline_id, check=False, timeout=600)
    pipeline = trainer.cli_json("training", "pipelines", "get", pipeline_id)

    stages = {s["name"]: s for s in pipeline["stages"]}
    assert stages["sft"]["phase"] == "COMPLETED" and stages["dpo"]["phase"] == "COMPLETED"
    assert stages["check"]["phase"] == "SUCCEEDED"
    dpo = trainer.cli_json("training", "runs", "get", stages["dpo"]["run"])
    assert (dpo["method"], dpo["source"]["run"]) == ("dpo", stages["sft"]["run"])
    evaluation = trainer.cli_json("training", "evaluations", "get", stages["check"]["run"])
    (correct,) = evaluation["metrics"]
    if correct["mean"] >= 0.5:
        assert pipeline["state"] == "COMPLETED", pipeline
    else:
        assert pipeline["state"] == "FAILED" and "the gate did not pass" in pipeline["failure"]
