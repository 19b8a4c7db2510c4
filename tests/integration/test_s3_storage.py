"""A trainer whose blob store is an S3 bucket (a real S3 endpoint on loopback, moto's server):
the demo's datasets, its SFT run and its GRPO run warm-started from it, each paused with a save
and resumed, train end to end through the real service, CLI, jobs and TRL; nothing is written
under the home's blob directory, and the store's credentials appear in no job log and no
record."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from peft import PeftConfig

from akka_training.rewards.rollouts import read_step_file
from akka_training.testing.service import TrainerProcess
from tests.integration.helpers import ensure_project, wait_for, wait_phase
from tests.s3_server import SECRET_KEY, Bucket

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"


@pytest.fixture
def trainer(trainer_factory: Any, dev_models: Path, s3_bucket: Bucket) -> TrainerProcess:
    t: TrainerProcess = trainer_factory(
        {
            "trainer": {
                "dev-models-dir": str(dev_models),
                "controller": {"interval-seconds": 0.2},
                "storage": s3_bucket.storage_settings,
            }
        },
        # The credentials reach the jobs from the settings, not from this environment.
        env={
            "AWS_ACCESS_KEY_ID": "",
            "AWS_SECRET_ACCESS_KEY": "",
            "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
        },
    )
    return t


def pause_and_resume(trainer: TrainerProcess, run_id: str, after_step: int) -> None:
    wait_for(trainer, run_id, lambda r: r.progress.observed_step >= after_step, timeout=300)
    trainer.cli("training", "runs", "pause", run_id, "--checkpoint", "save")
    paused = wait_phase(trainer, run_id, "PAUSED", timeout=300)
    assert paused.progress.saved_step == paused.progress.observed_step
    trainer.cli("training", "runs", "resume", run_id)
    done = wait_phase(trainer, run_id, "COMPLETED", timeout=600)
    assert done.attempt == 2


def test_the_demo_trains_end_to_end_with_its_blobs_in_s3(
    trainer: TrainerProcess, s3_bucket: Bucket, tmp_path: Path
) -> None:
    info = trainer.cli_json("training", "info")
    assert info["storage"] == s3_bucket.url
    ensure_project(trainer, "demo")
    for name in ("arithmetic", "arithmetic-eval", "arithmetic-prompts"):
        trainer.cli(
            "training", "datasets", "register", f"demo/{name}",
            "-f", str(EXAMPLES / "data" / f"{name}.jsonl"),
        )  # fmt: skip
    datasets = s3_bucket.keys("datasets/")
    assert len([k for k in datasets if k.startswith("datasets/sha256/")]) == 3
    assert not [k for k in datasets if k.startswith("datasets/uploads/")]

    # The demo's SFT run, paused with a save and resumed from its snapshot.
    sft = trainer.cli_json("training", "runs", "start", "-f", str(EXAMPLES / "sft.yaml"))["id"]
    pause_and_resume(trainer, sft, after_step=3)
    steps = trainer.cli_json("training", "runs", "metrics", sft, "--fields", "loss")["steps"]
    assert [s["step"] for s in steps] == list(range(1, 61))

    # The demo's GRPO run warm-started from it, paused and resumed too.
    plan = yaml.safe_load((EXAMPLES / "grpo.yaml").read_text().replace("SFT_RUN_ID", sft))
    path = tmp_path / "grpo.yaml"
    path.write_text(yaml.safe_dump(plan))
    grpo = trainer.cli_json("training", "runs", "start", "-f", str(path))["id"]
    pause_and_resume(trainer, grpo, after_step=2)
    rollouts = trainer.cli_json("training", "runs", "rollouts", grpo, "--step", "20")
    assert rollouts["count"] == 4 * 8

    keys = s3_bucket.keys()
    for run in (sft, grpo):
        assert f"runs/{run}/adapter/adapter_model.safetensors" in keys
        assert f"runs/{run}/tokenizer/tokenizer_config.json" in keys
        assert any(k.startswith(f"runs/{run}/snapshots/step-") for k in keys)
    assert f"runs/{grpo}/rollouts/step-20.parquet" in keys
    stored = read_step_file(
        s3_bucket.server.client()
        .get_object(Bucket=s3_bucket.name, Key=f"trainer/runs/{grpo}/rollouts/step-20.parquet")[
            "Body"
        ]
        .read()
    )
    assert len(stored) == 4 * 8
    # The adapter leaves through the service, streamed from the bucket.
    out = tmp_path / "adapter"
    trainer.cli("training", "runs", "download", grpo, "-d", str(out))
    assert PeftConfig.from_pretrained(str(out)).r == 16

    # Nothing under the home's blob directory, no upload left open.
    blobs = trainer.home / "blobs"
    assert not blobs.exists() or not any(p.is_file() for p in blobs.rglob("*"))
    assert s3_bucket.open_uploads() == []
    # The credentials are in no job log and no record.
    for run in (sft, grpo):
        assert SECRET_KEY not in trainer.cli("training", "runs", "logs", run).stdout
        assert SECRET_KEY not in json.dumps(trainer.cli_json("training", "runs", "get", run))
    # Nor in a job's log or spec; the local backend's hand-off to its runner (launch.json,
    # mode 600) holds them beside the job's token, as the environment it starts the job with.
    for job_file in (trainer.home / "jobs").rglob("*"):
        if job_file.is_file() and job_file.name != "launch.json":
            assert SECRET_KEY not in job_file.read_text(errors="replace"), job_file
        elif job_file.is_file():
            assert job_file.stat().st_mode & 0o077 == 0
