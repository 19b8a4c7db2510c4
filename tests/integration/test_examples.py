"""Every example plan under examples/ passes the submission checks of a real trainer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from akka_training.core.evaluations import parse_evaluation
from akka_training.core.parsing import parse_plan
from akka_training.core.plans import EvaluateStage, PipelinePlan
from tests.integration.helpers import ensure_project, wait_phase, write_plan

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
DATA = {
    "demo/arithmetic": "arithmetic.jsonl",
    "demo/arithmetic-eval": "arithmetic-eval.jsonl",
    "demo/arithmetic-prompts": "arithmetic-prompts.jsonl",
    "demo/arithmetic-preference": "arithmetic-preference.jsonl",
    "demo/arithmetic-preference-eval": "arithmetic-preference-eval.jsonl",
}


def deployment(trainer_factory: Any, dev_models: Path, engine: str) -> Any:
    trainer = trainer_factory(
        {
            "trainer": {
                "dev-models-dir": str(dev_models),
                "reinforcement": {"engine": engine},
                "testing": {"scripted-jobs": True},
                "controller": {"interval-seconds": 0.2},
                "pools": [{"name": "default", "accelerator": "cpu", "devices": 4}],
            }
        },
        env={"AKKA_SCRIPTED_STEP_SECONDS": "0.01"},
    )
    ensure_project(trainer, "demo")
    for ref, name in DATA.items():
        trainer.cli("training", "datasets", "register", ref, "-f", str(EXAMPLES / "data" / name))
    return trainer


def dry_run(trainer: Any, plan: dict[str, Any], noun: str = "runs") -> dict[str, Any]:
    path = write_plan(trainer, plan, "example.yaml")
    return dict(trainer.cli_json("training", noun, "start", "-f", str(path), "--dry-run"))


def test_every_example_is_covered() -> None:
    assert sorted(p.name for p in EXAMPLES.glob("*.yaml")) == [
        "dpo.yaml",
        "evaluation.yaml",
        "grpo-verl-4gpu.yaml",
        "grpo.yaml",
        "gspo.yaml",
        "pipeline-dpo.yaml",
        "pipeline.yaml",
        "sft.yaml",
    ]


@pytest.mark.slow
def test_the_trl_examples_pass_the_checks(trainer_factory: Any, dev_models: Path) -> None:
    trainer = deployment(trainer_factory, dev_models, "trl")
    sft = yaml.safe_load((EXAMPLES / "sft.yaml").read_text())
    assert dry_run(trainer, sft)["settings"]["method"] == "sft"
    run = trainer.cli_json("training", "runs", "start", "-f", str(write_plan(trainer, sft)))["id"]
    wait_phase(trainer, run, "COMPLETED")
    for name in ("grpo.yaml", "gspo.yaml"):
        plan = yaml.safe_load((EXAMPLES / name).read_text().replace("SFT_RUN_ID", run))
        settings = dry_run(trainer, plan)["settings"]
        assert settings["source"]["kind"] == "warm-start"
        assert settings["config"]["rlHyperparams"]["lora"]["rank"] == 16  # the adapter's rank
    dpo = yaml.safe_load((EXAMPLES / "dpo.yaml").read_text().replace("SFT_RUN_ID", run))
    settings = dry_run(trainer, dpo)["settings"]
    assert (settings["method"], settings["engine"]) == ("dpo", "trl")
    assert settings["source"]["kind"] == "warm-start"
    assert settings["config"]["hyperparams"]["lora"]["rank"] == 16  # the adapter's rank
    pipeline = yaml.safe_load((EXAMPLES / "pipeline.yaml").read_text())
    stages = dry_run(trainer, pipeline, "pipelines")["stages"]
    assert [s["name"] for s in stages] == ["sft", "grpo", "check", "distill"]
    assert stages[2]["settings"]["gate"] == {"metric": "correct", "min": 0.5}
    pipeline = yaml.safe_load((EXAMPLES / "pipeline-dpo.yaml").read_text())
    stages = dry_run(trainer, pipeline, "pipelines")["stages"]
    assert [s["name"] for s in stages] == ["sft", "dpo", "check"]
    assert stages[1]["sourceStage"] == "sft"
    assert stages[2]["settings"]["gate"] == {"metric": "correct", "min": 0.5}


@pytest.mark.slow
def test_the_verl_example_passes_the_checks_of_a_verl_deployment(
    trainer_factory: Any, dev_models: Path
) -> None:
    trainer = deployment(trainer_factory, dev_models, "verl")
    plan = yaml.safe_load((EXAMPLES / "grpo-verl-4gpu.yaml").read_text())
    settings = dry_run(trainer, plan)["settings"]
    assert settings["engine"] == "verl" and settings["execution"]["gpus"] == 4
    # dpo trains on TRL whatever the reinforcement engine.
    dpo = yaml.safe_load((EXAMPLES / "dpo.yaml").read_text())
    del dpo["source"]
    assert dry_run(trainer, dpo)["settings"]["engine"] == "trl"
    trl = deployment(trainer_factory, dev_models, "trl")
    path = write_plan(trl, plan)
    refused = trl.cli("training", "runs", "start", "-f", str(path), "--dry-run", check=False)
    assert refused.returncode == 1 and "qualified at 1 GPU(s)" in refused.stderr


@pytest.mark.parametrize(
    "name",
    [
        "sft.yaml",
        "dpo.yaml",
        "grpo.yaml",
        "gspo.yaml",
        "grpo-verl-4gpu.yaml",
        "pipeline.yaml",
        "pipeline-dpo.yaml",
    ],
)
def test_examples_parse(name: str) -> None:
    parse_plan(yaml.safe_load((EXAMPLES / name).read_text()))


def test_the_pipeline_example_gates_its_last_stage_on_an_evaluation() -> None:
    plan = parse_plan(yaml.safe_load((EXAMPLES / "pipeline.yaml").read_text()))
    assert isinstance(plan, PipelinePlan)
    check = plan.stages[2]
    assert isinstance(check, EvaluateStage) and check.source == "@grpo"
    assert check.gate is not None and (check.gate.metric, check.gate.min) == ("correct", 0.5)
    assert [s.name for s in plan.stages] == ["sft", "grpo", "check", "distill"]


def test_the_evaluation_example_parses() -> None:
    plan = parse_evaluation(yaml.safe_load((EXAMPLES / "evaluation.yaml").read_text()))
    assert plan.source is not None and plan.source.run == "GRPO_RUN_ID"
    assert [m.kind for m in plan.metrics] == ["match", "regex", "loss"]


def test_the_demo_plans_parse() -> None:
    demo = EXAMPLES / "demo"
    assert sorted(p.name for p in demo.glob("*.yaml")) == [
        "evaluation.yaml",
        "grpo.yaml",
        "sft.yaml",
    ]
    for name in ("sft.yaml", "grpo.yaml"):
        parse_plan(yaml.safe_load((demo / name).read_text()))
    plan = parse_evaluation(yaml.safe_load((demo / "evaluation.yaml").read_text()))
    assert plan.dataset == "demo/add-zero-eval"
