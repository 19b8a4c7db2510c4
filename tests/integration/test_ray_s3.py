"""Ray without a shared filesystem: a Ray node whose home is its own (not the service's), a blob
store in S3 (a real endpoint on loopback) and a base model in the same bucket. A real SFT job
on the node downloads the model once into the node's cache, reads its dataset from the store
and writes its snapshots and adapter there; the service's home holds no blob and no model. A
node that cannot reach its store fails the run with a reason that names the store and the
settings to check."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.helpers import (
    ensure_project,
    register_dataset,
    sft_plan,
    start_run,
    wait_phase,
)
from tests.ray_cluster import RayHead
from tests.s3_server import Bucket

pytestmark = [pytest.mark.ray, pytest.mark.slow]

MODEL_KEY = "models/tiny-chat"


@pytest.fixture
def worker_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ray-worker-home")


@pytest.fixture
def head(ray_head_factory: Any, worker_home: Path) -> Iterator[RayHead]:
    # The node's HOME and AKKA_HOME are its own; its jobs inherit them.
    yield ray_head_factory(
        env={"HOME": str(worker_home), "AKKA_HOME": str(worker_home / "akka")},
    )


def upload_model(bucket: Bucket, model_dir: Path) -> str:
    client = bucket.server.client()
    for path in sorted(p for p in model_dir.rglob("*") if p.is_file()):
        key = f"{MODEL_KEY}/{path.relative_to(model_dir).as_posix()}"
        client.upload_file(str(path), bucket.name, key)
    return f"s3://{bucket.name}/{MODEL_KEY}"


def settings_for(head: RayHead, bucket: Bucket, model_url: str, **ray: Any) -> dict[str, Any]:
    return {
        "trainer": {
            "backend": "ray",
            "controller": {"interval-seconds": 0.2, "retry-base-seconds": 0.2},
            "storage": bucket.storage_settings,
            "pools": [{"name": "default", "accelerator": "cpu", "devices": 1, "label": "default"}],
            "ray": {
                "address": head.dashboard_url,
                "python": sys.executable,
                # Relative to nothing of the service's: the node's own temporary directory.
                "work-dir": str(head.jobs_dir),
                **ray,
            },
            "catalog": [
                {
                    "id": "tiny-chat",
                    "path": model_url,
                    "context-length": 2048,
                    "envelopes": [
                        {"method": "sft", "engine": "trl", "gpus": 1, "precision": "FP32"}
                    ],
                }
            ],
        }
    }


def test_a_ray_job_trains_from_the_store_with_a_home_of_its_own(
    trainer_factory: Any,
    head: RayHead,
    s3_bucket: Bucket,
    dev_models: Path,
    worker_home: Path,
) -> None:
    model_url = upload_model(s3_bucket, dev_models / "tiny-chat")
    trainer = trainer_factory(settings_for(head, s3_bucket, model_url))
    assert trainer.home != worker_home
    ensure_project(trainer, "maths")
    register_dataset(trainer, "maths/train")
    run = start_run(trainer, sft_plan("maths", "maths/train", steps=4))
    done = wait_phase(trainer, run, "COMPLETED", "FAILED", timeout=300)
    logs = trainer.cli("training", "runs", "logs", run).stdout
    assert done.phase == "COMPLETED", logs
    keys = s3_bucket.keys(f"runs/{run}/")
    assert f"runs/{run}/adapter/adapter_model.safetensors" in keys
    assert any(k.startswith(f"runs/{run}/snapshots/step-2/") for k in keys)
    # The model came from the bucket into the node's cache, under the node's own home.
    cached = list((worker_home / ".cache" / "akka" / "models").glob("tiny-chat-*"))
    assert len(cached) == 1 and (cached[0] / "config.json").is_file()
    assert (cached[0] / ".akka-complete").read_text().strip() == model_url
    assert f"downloading the base model {model_url}" in logs
    # The service's home holds no blob and no model: nothing was shared through it.
    blobs = trainer.home / "blobs"
    assert not blobs.exists() or not any(p.is_file() for p in blobs.rglob("*"))
    assert not (trainer.home / "models").exists()

    # A second run on the node finds the model in its cache.
    again = start_run(trainer, sft_plan("maths", "maths/train", steps=2))
    assert wait_phase(trainer, again, "COMPLETED", "FAILED", timeout=300).phase == "COMPLETED"
    assert "downloading the base model" not in trainer.cli("training", "runs", "logs", again).stdout


def test_a_node_that_cannot_reach_the_store_fails_naming_it(
    trainer_factory: Any, head: RayHead, s3_bucket: Bucket
) -> None:
    # The service reaches its bucket; the jobs are told a bucket that does not exist.
    elsewhere = f"s3://{s3_bucket.name}-missing/trainer"
    trainer = trainer_factory(
        settings_for(head, s3_bucket, "s3://unused/model", **{"storage-url": elsewhere})
    )
    ensure_project(trainer, "maths")
    register_dataset(trainer, "maths/train")
    run = start_run(trainer, sft_plan("maths", "maths/train", steps=2))
    failed = wait_phase(trainer, run, "FAILED", "COMPLETED", timeout=300)
    assert failed.phase == "FAILED"
    record = trainer.cli_json("training", "runs", "get", run)
    assert record["failure"]["code"] == "store-unreachable"
    reason = record["failure"]["reason"]
    assert reason.startswith(
        "this run's job could not reach the blob store; the detail names the store and the "
        "settings to check\n"
        f"The blob store {elsewhere} could not be reached ("
    )
    assert (
        "check trainer.storage.url (trainer.ray.storage-url where jobs on Ray reach it elsewhere)"
        in reason
    )
