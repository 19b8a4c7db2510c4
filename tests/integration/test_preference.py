"""Preference fine-tuning through the real service and CLI: a dpo run warm-started from an sft
run, what `runs get` and `runs metrics` show of it, a preference evaluation of both, and the
example pipeline sft -> dpo -> evaluate with its gate."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from akka_training.testing.service import TrainerProcess
from tests.engines.rows import chat_rows, pair_rows
from tests.integration.helpers import ensure_project, write_plan

# Every test here trains for real in a trainer process.
pytestmark = pytest.mark.slow

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
# The steps of the DPO run (batches of 8 of the 96 generated pairs).
DPO_STEPS = 12
HELD_OUT = "demo/sum-pairs-held-out"


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
    # Generated arithmetic (a three-digit plus a two-digit number): the right sum preferred
    # over a refusal to answer, pairs to train on and held-out pairs drawn apart. The tiny
    # model cannot learn which of two sums is right (the examples' pairs), so a held-out share
    # of those is noise; it learns to prefer answering, which the held-out pairs measure.
    for name, rows in (
        ("sums", chat_rows(96)),
        ("sum-pairs", answered(pair_rows(96))),
        ("sum-pairs-held-out", answered(pair_rows(32, seed=7))),
    ):
        path = t.home / f"{name}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        t.cli("training", "datasets", "register", f"demo/{name}", "-f", str(path))
    yield t
    t.close()


def answered(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The pairs with a refusal as the rejected answer."""
    refusal = [{"role": "assistant", "content": "#### I don't know"}]
    return [{**row, "non_preferred_output": refusal} for row in rows]


def run_to_end(trainer: TrainerProcess, plan: dict[str, Any], name: str) -> dict[str, Any]:
    path = write_plan(trainer, plan, f"plan-{name}.yaml")
    run_id = trainer.cli_json("training", "runs", "start", "-f", str(path))["id"]
    trainer.cli("training", "runs", "wait", run_id, "--exit-status", timeout=600)
    return dict(trainer.cli_json("training", "runs", "get", run_id))


def evaluate(
    trainer: TrainerProcess, run_id: str, dataset: str = HELD_OUT, **metric: str
) -> dict[str, Any]:
    plan = {
        "kind": "evaluation",
        "project": "demo",
        "baseModel": "tiny-chat",
        "source": {"run": run_id},
        "dataset": dataset,
        "metrics": [{"kind": "preference", **metric}],
    }
    path = write_plan(trainer, plan, f"evaluation-{run_id}-{len(metric)}.yaml")
    evaluation_id = trainer.cli_json("training", "evaluations", "start", "-f", str(path))["id"]
    trainer.cli("training", "evaluations", "wait", evaluation_id, "--exit-status", timeout=600)
    record: dict[str, Any] = trainer.cli_json("training", "evaluations", "get", evaluation_id)
    return record


def test_sft_then_dpo_raises_the_preference_share_above_the_sft_adapters(
    trainer: TrainerProcess,
) -> None:
    """The issue's recipe through the service: SFT, DPO from the SFT adapter, then preference
    evaluations on held-out pairs. DPO ranks more of its training pairs right at its last step
    than at its first, and on the held-out pairs, against the SFT adapter (where the SFT
    adapter scores 0.5), its share's interval lies above 0.5."""
    got = trainer.cli_json("training", "datasets", "get", "demo/arithmetic-preference")
    assert got["format"] == "preference"
    sft = yaml.safe_load((EXAMPLES / "sft.yaml").read_text())
    sft["config"].pop("evalDataset")
    sft["config"]["dataset"] = "demo/sums"
    sft["config"]["hyperparams"]["training"] = {"maxSteps": 6, "batchSize": 16}
    sft_run = run_to_end(trainer, sft, "sft")
    dpo = yaml.safe_load((EXAMPLES / "dpo.yaml").read_text().replace("SFT_RUN_ID", sft_run["id"]))
    dpo["config"].pop("evalDataset")
    dpo["config"]["dataset"] = "demo/sum-pairs"
    dpo["config"]["hyperparams"]["training"] = {"maxSteps": DPO_STEPS, "batchSize": 8}
    dpo["config"]["hyperparams"]["optimizer"] = {"learningRate": 5e-3}
    run = run_to_end(trainer, dpo, "dpo")

    assert (run["phase"], run["method"], run["engine"]) == ("COMPLETED", "dpo", "trl")
    assert run["source"]["kind"] == "warm-start"
    assert run["settings"]["reference"]["run"] == sft_run["id"]
    assert run["preference"]["step"] == DPO_STEPS
    assert set(run["preference"]) == {
        "step",
        "rewardsChosen",
        "rewardsRejected",
        "rewardsMargins",
        "rewardsAccuracies",
        "logpsChosen",
        "logpsRejected",
        "reference",
    }
    assert run["preference"]["reference"] == f"run {sft_run['id']}"
    assert run["dataFit"]["rows"] == 96 and run["dataFit"]["rowsDropped"] == 0
    out = trainer.cli("training", "runs", "get", run["id"]).stdout
    assert "Preference:" in out and "Pairs ranked right" in out
    reference = next(line.split() for line in out.splitlines() if "Reference" in line)
    assert reference == ["Reference", "run", sft_run["id"]]
    steps = trainer.cli_json("training", "runs", "metrics", run["id"], "--fields", "rewards")
    first, last = steps["steps"][0], steps["steps"][-1]
    # The SFT adapter is the policy and the reference at the first step: rewards are 0, and no
    # pair is ranked right yet; training ranks more of them right.
    assert (first["rewards/chosen"], first["rewards/rejected"]) == (0.0, 0.0)
    print(
        f"rewards/accuracies: first {first['rewards/accuracies']}, last {last['rewards/accuracies']}"
    )
    assert last["rewards/accuracies"] > first["rewards/accuracies"], steps["steps"]

    # The default: the DPO adapter against its own reference, the SFT adapter, against which
    # the SFT adapter itself scores exactly 0.5 (every margin 0). DPO's held-out share lies
    # above that, its whole 95% interval included.
    own = evaluate(trainer, run["id"])
    (value,) = own["metrics"]
    assert (value["kind"], value["count"]) == ("preference", 32)
    assert value["reference"] == f"run {sft_run['id']}"
    shown = f"{value['mean']:.3f} [{value['low']:.3f}, {value['high']:.3f}]"
    print(f"held-out preference share of dpo against the sft adapter: {shown}")
    assert 0.5 < value["low"] <= value["mean"] <= value["high"], shown

    # One scale, both adapters against the base model: DPO does not rank fewer pairs right.
    shares = {
        name: evaluate(trainer, r["id"], reference="base-model")["metrics"][0]
        for name, r in (("sft", sft_run), ("dpo", run))
    }
    for one in shares.values():
        assert one["reference"] == "the base model" and one["low"] <= one["mean"] <= one["high"]
    both = {n: f"{v['mean']:.3f} [{v['low']:.3f}, {v['high']:.3f}]" for n, v in shares.items()}
    print(f"held-out preference share against the base model: {both}")
    assert shares["dpo"]["mean"] >= shares["sft"]["mean"], both
    # The examples' held-out pairs score too (which sum is right: noise for the tiny model).
    (examples,) = evaluate(trainer, run["id"], "demo/arithmetic-preference-eval")["metrics"]
    assert examples["count"] == 8 and examples["low"] <= examples["mean"] <= examples["high"]
    shown_own = trainer.cli("training", "evaluations", "get", own["id"]).stdout
    assert f"preference is measured against run {sft_run['id']}." in shown_own


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
