"""Plans through the real service and CLI: every refusal with its words, dry runs, resolution."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from akka_training.testing.service import TrainerProcess
from tests.integration.helpers import (
    ensure_project,
    register_dataset,
    wait_phase,
    write_plan,
)

# Every test here talks to a trainer process this module starts.
pytestmark = pytest.mark.slow

CATALOG = [
    {
        "id": "qwen3-0.6b",
        "path": "/models/qwen3-0.6b",
        "revision": "rev-1",
        "context-length": 4096,
        "envelopes": [
            {
                "method": "sft",
                "engine": "trl",
                "gpus": 1,
                "precision": "BF16",
                "host-memory-gib": 8,
            },
            *[
                {
                    "method": m,
                    "engine": "verl",
                    "gpus": g,
                    "precision": "BF16",
                    "gpu-memory-gib": 40,
                    "host-memory-gib": 32 * g,
                }
                for m in ("grpo", "gspo")
                for g in (1, 4)
            ],
        ],
    },
    {
        "id": "gemma-vision",
        "path": "/models/gemma-vision",
        "modality": "image-text",
        "envelopes": [
            {"method": "sft", "engine": "trl", "gpus": 1},
            {"method": "grpo", "engine": "verl", "gpus": 1},
        ],
    },
]

IMAGE_ROWS = [
    {
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "image", "url": "https://example.invalid/cat.png"},
                    {"type": "text", "text": "What is it?"},
                ],
            },
            {"role": "assistant", "content": "a cat"},
        ]
    }
]


@pytest.fixture(scope="module")
def verl(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from akka_training.testing.service import TrainerProcess

    trainer = TrainerProcess(
        tmp_path_factory.mktemp("plans"),
        {
            "trainer": {
                "catalog": CATALOG,
                "reinforcement": {"engine": "verl"},
                "testing": {"scripted-jobs": True},
                "controller": {"interval-seconds": 0.2},
                "pools": [
                    {
                        "name": "training",
                        "accelerator": "H100",
                        "devices": 8,
                        "max-claim": 4,
                        "host-ram-gib": 256,
                    },
                    {
                        "name": "small",
                        "accelerator": "L4",
                        "devices": 2,
                        "max-claim": 1,
                        "host-ram-gib": 16,
                    },
                ],
            }
        },
        env={"AKKA_SCRIPTED_STEP_SECONDS": "0.05"},
    ).start()
    ensure_project(trainer, "maths")
    register_dataset(trainer, "maths/train")
    register_dataset(trainer, "maths/images", IMAGE_ROWS)
    yield trainer
    trainer.close()


def grpo(**changes: Any) -> dict[str, Any]:
    plan: dict[str, Any] = {
        "kind": "run",
        "project": "maths",
        "baseModel": "qwen3-0.6b",
        "config": {
            "dataset": "maths/train",
            "method": "grpo",
            "rlHyperparams": {
                "promptsPerStep": 8,
                "generationsPerPrompt": 4,
                "maxCompletionTokens": 256,
            },
            "reward": {"terms": [{"name": "correct", "kind": "match", "mode": "final-number"}]},
        },
        "execution": {"gpus": 1, "pool": "training"},
    }
    for path, value in changes.items():
        target = plan
        keys = path.split("__")
        for key in keys[:-1]:
            target = target.setdefault(key, {})
        target[keys[-1]] = value
    return plan


def refused(trainer: TrainerProcess, plan: dict[str, Any]) -> str:
    path = write_plan(trainer, plan, "refused.yaml")
    result = trainer.cli("training", "runs", "start", "-f", str(path), "--dry-run", check=False)
    assert result.returncode == 1, result.stdout
    assert "Traceback" not in result.stderr
    return result.stderr


def accepted(trainer: Any, plan: dict[str, Any]) -> dict[str, Any]:
    path = write_plan(trainer, plan, "accepted.yaml")
    return dict(trainer.cli_json("training", "runs", "start", "-f", str(path), "--dry-run"))


def test_prompts_per_step_must_divide_by_gpus(verl: Any) -> None:
    err = refused(verl, grpo(config__rlHyperparams__promptsPerStep=6, execution__gpus=4))
    assert "config.rlHyperparams.promptsPerStep (6) must be divisible by execution.gpus (4)" in err
    assert "1 problem" in err


def test_a_gpu_count_without_an_envelope_lists_the_qualified_counts(verl: Any) -> None:
    err = refused(verl, grpo(execution__gpus=2))
    assert "qualified at 1 or 4 GPU(s)" in err
    assert "Set execution.gpus to one of these" in err


def test_rollout_gpus_and_staleness_are_refused_under_verl(verl: Any) -> None:
    err = refused(verl, grpo(execution__rolloutGpus=1, execution__stalenessThreshold=2))
    for key in ("rolloutGpus", "stalenessThreshold"):
        assert f"execution.{key}" in err
    assert "the rollout engine runs on the training devices" in err
    assert "Leave rolloutGpus out or set it to 0, and count every device in execution.gpus" in err
    assert "2 problems" in err
    accepted(verl, grpo(execution__rolloutGpus=0, execution__stalenessThreshold=0))


def test_positive_kl_beta_from_another_runs_adapter_is_refused_under_verl(verl: Any) -> None:
    sft = {
        "kind": "run",
        "project": "maths",
        "baseModel": "qwen3-0.6b",
        "config": {
            "dataset": "maths/train",
            "method": "sft",
            "hyperparams": {"training": {"maxSteps": 4}},
        },
        "execution": {"saveEvery": 2, "pool": "training"},
    }
    path = write_plan(verl, sft, "sft.yaml")
    source = verl.cli_json("training", "runs", "start", "-f", str(path))["id"]
    wait_phase(verl, source, "COMPLETED")
    for src in ({"run": source}, {"run": source, "snapshot": "step-2"}):
        err = refused(verl, grpo(source=src, config__rlHyperparams__klBeta=0.05))
        assert "verl's reference policy is the base model" in err
        assert "Set klBeta to 0" in err
        accepted(verl, grpo(source=src, config__rlHyperparams__klBeta=0.0))
    # Without a source a KL penalty is fine.
    accepted(verl, grpo(config__rlHyperparams__klBeta=0.05))
    err = refused(verl, grpo(source={"run": source, "snapshot": "step-99"}))
    assert "has no snapshot 'step-99'; its snapshots: step-2" in err


def test_reinforcement_over_a_dataset_with_images_is_refused(verl: Any) -> None:
    err = refused(verl, grpo(config__dataset="maths/images"))
    assert "a grpo or gspo run cannot train on images, whatever the base model" in err
    vision = grpo(baseModel="gemma-vision", config__dataset="maths/images")
    assert "cannot train on images" in refused(verl, vision)


def test_a_method_the_model_lacks_under_the_engine_is_refused_with_what_it_supports(
    verl: Any,
) -> None:
    err = refused(verl, grpo(baseModel="gemma-vision"))
    assert "gemma-vision does not support grpo under the verl engine" in err
    assert "trainer.reinforcement.image-text" in err
    assert "it supports: sft" in err


def test_pool_limits_and_unknown_names(verl: Any) -> None:
    err = refused(verl, grpo(execution__pool="small", execution__gpus=4))
    assert "above the largest claim pool small accepts (MAX CLAIM 1)" in err
    assert (
        "needs 128 GiB of host memory per node, more than pool small has (HOST RAM 16 GiB)" in err
    )
    err = refused(
        verl,
        grpo(
            project="nowhere",
            baseModel="llama-9000",
            config__dataset="maths/missing",
            execution__pool="huge",
            source={"run": "deadbeef0000"},
        ),
    )
    assert "There is no project 'nowhere'" in err
    assert "There is no base model 'llama-9000'" in err
    assert "set baseModel to one of: qwen3-0.6b, gemma-vision" in err
    assert "There is no pool 'huge'" in err
    assert "config.dataset:" in err
    assert "There is no run 'deadbeef0000'" in err
    err = refused(verl, grpo(config__dataset="maths/missing"))
    assert (
        "config.dataset: There is no dataset maths/missing; datasets in maths: images, train."
        in err
    )


def test_batch_shapes_the_engine_would_reject(verl: Any) -> None:
    err = refused(verl, grpo(config__rlHyperparams__generationsPerPrompt=1))
    assert "set it to 2 or more" in err
    err = refused(
        verl, grpo(config__rlHyperparams__maxCompletionTokens=4096, config__maxSeqLength=1024)
    )
    assert "leaves no room for the prompt" in err


def test_every_problem_is_reported_at_once(verl: Any) -> None:
    plan = grpo(
        execution__gpus=4,
        execution__rolloutGpus=2,
        config__rlHyperparams__promptsPerStep=6,
        config__dataset="maths/images",
    )
    err = refused(verl, plan)
    assert "5 problems" in err
    for words in (
        "must be divisible by execution.gpus (4)",
        "promptsPerStep (6) is above the 1 row of config.dataset maths/images:v1",
        "execution.rolloutGpus (2) is not supported under verl",
        "cannot train on images",
        "qwen3-0.6b is a text model",
    ):
        assert words in err
    schema = grpo()
    schema["config"]["rlHyperparams"]["promtsPerStep"] = 4
    schema["execution"]["gpu"] = 2
    err = refused(verl, schema)
    assert "config.rlHyperparams.promtsPerStep is not a known field" in err
    assert "execution.gpu is not a known field" in err
    assert "known fields: gpus, pool, saveEvery" in err


def test_a_dry_run_starts_nothing(verl: Any) -> None:
    before = len(verl.cli_json("training", "runs", "list"))
    result = accepted(verl, grpo())
    assert result["dryRun"] is True
    path = write_plan(verl, grpo(), "dry.yaml")
    text = verl.cli("training", "runs", "start", "-f", str(path), "--dry-run").stdout
    assert "Nothing was started" in text
    assert len(verl.cli_json("training", "runs", "list")) == before
    assert verl.cli_json("training", "capacity")["claims"] == []


def test_show_resolved_is_what_runs_get_shows_once_started(verl: Any) -> None:
    plan = grpo(config__rlHyperparams__promptsPerStep=4)
    path = write_plan(verl, plan, "resolved.yaml")
    dry_text = verl.cli(
        "training", "runs", "start", "-f", str(path), "--dry-run", "--show-resolved"
    ).stdout
    dry_json = verl.cli_json(
        "training", "runs", "start", "-f", str(path), "--dry-run", "--show-resolved"
    )
    settings = dry_json["settings"]
    # Every default is filled and every reference pinned.
    assert settings["dataset"]["version"] == 1 and len(settings["dataset"]["sha256"]) == 64
    assert settings["config"]["dataset"] == f"maths/train@sha256:{settings['dataset']['sha256']}"
    assert settings["baseModel"] == {
        "id": "qwen3-0.6b",
        "path": "/models/qwen3-0.6b",
        "revision": "rev-1",
        "modality": "text",
        "contextLength": 4096,
    }
    assert settings["engine"] == "verl"
    assert settings["config"]["rlHyperparams"]["clip"] == {"low": 0.2, "high": 0.28}
    assert settings["config"]["rlHyperparams"]["temperature"] == 1.0
    assert settings["config"]["maxSeqLength"] == 2048
    assert settings["config"]["model"]["precision"] == "BF16"
    assert settings["execution"]["pool"] == "training"
    run_id = verl.cli_json("training", "runs", "start", "-f", str(path))["id"]
    assert verl.cli_json("training", "runs", "get", run_id)["settings"] == settings
    assert verl.cli("training", "runs", "get", run_id, "--settings").stdout == dry_text
    verl.cli("training", "runs", "cancel", run_id, check=False)


def test_gspo_gets_its_own_clip_range(verl: Any) -> None:
    settings = accepted(verl, grpo(config__method="gspo"))["settings"]
    assert settings["config"]["rlHyperparams"]["clip"] == {"low": 0.0003, "high": 0.0004}


def test_a_submission_id_makes_a_start_idempotent(verl: Any) -> None:
    plan = grpo(submissionId="nightly-2026-12-02")
    path = write_plan(verl, plan, "idem.yaml")
    first = verl.cli_json("training", "runs", "start", "-f", str(path))
    second = verl.cli_json("training", "runs", "start", "-f", str(path))
    assert first["id"] == second["id"] and second["existing"] is True
    verl.cli("training", "runs", "cancel", first["id"], check=False)


def test_pipeline_dry_run_resolves_registered_stages_and_omits_stage_outputs(verl: Any) -> None:
    first = copy.deepcopy(grpo())
    second = copy.deepcopy(grpo())
    second["config"]["dataset"] = "@explore"
    pipeline: dict[str, Any] = {
        "kind": "pipeline",
        "project": "maths",
        "stages": [
            {
                "name": "explore",
                "type": "train",
                **{k: v for k, v in first.items() if k not in ("kind", "project")},
            },
            {
                "name": "distill",
                "type": "train",
                **{k: v for k, v in second.items() if k not in ("kind", "project")},
            },
        ],
    }
    pipeline["stages"][1]["config"]["method"] = "sft"
    pipeline["stages"][1]["config"].pop("rlHyperparams")
    pipeline["stages"][1]["config"].pop("reward")
    path = write_plan(verl, pipeline, "pipeline.yaml")
    data = verl.cli_json(
        "training", "pipelines", "start", "-f", str(path), "--dry-run", "--show-resolved"
    )
    explore, distill = data["stages"]
    assert explore["settings"]["dataset"]["name"] == "maths/train"
    assert "settings" not in distill
    assert "output of stage explore" in distill["omitted"]
    text = verl.cli(
        "training", "pipelines", "start", "-f", str(path), "--dry-run", "--show-resolved"
    ).stdout
    assert "Stage explore:" in text and "Resolved settings:" in text
    assert "Stage distill:\n  omitted: it trains on the output of stage explore" in text
    # A stage may only name an earlier stage, and only a reinforcement stage produces a dataset.
    bad = json.loads(json.dumps(pipeline))
    bad["stages"][0]["config"]["dataset"] = "@distill"
    path = write_plan(verl, bad, "bad-pipeline.yaml")
    result = verl.cli("training", "pipelines", "start", "-f", str(path), "--dry-run", check=False)
    assert result.returncode == 1
    assert "must name an earlier stage of this pipeline" in result.stderr


def test_values_the_database_cannot_store_are_refused_through_the_cli(verl: Any) -> None:
    # As a user writes them: `1e29` (no dot) is text to YAML 1.1, `true` a boolean.
    path = verl.home / "unstorable.yaml"
    path.write_text(
        "kind: run\nproject: maths\nbaseModel: qwen3-0.6b\n"
        f"modelName: {'m' * 129}\n"
        "config:\n"
        "  dataset: maths/train\n"
        "  method: grpo\n"
        "  rlHyperparams:\n"
        "    promptsPerStep: 8\n"
        "    generationsPerPrompt: true\n"
        "    training: {maxSteps: 1e29}\n"
        "  reward:\n"
        "    terms: [{name: correct, kind: match}]\n"
        "execution: {gpus: 1, pool: training}\n"
    )
    result = verl.cli("training", "runs", "start", "-f", str(path), "--dry-run", check=False)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert result.stderr.strip() == (
        "error: The plan was refused (3 problems):\n"
        "  - modelName is 129 characters long; it holds at most 128. Shorten it.\n"
        "  - config.rlHyperparams.generationsPerPrompt is true; set a whole number.\n"
        "  - config.rlHyperparams.training.maxSteps is '1e29'; set a whole number."
    )
