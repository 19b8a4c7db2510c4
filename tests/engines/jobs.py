"""Building job specs and running jobs for the engine tests."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Literal

from akka_training.blobstore import BlobStore
from akka_training.core.catalog import Engine
from akka_training.core.plans import Execution, RunConfig
from akka_training.core.resolved import (
    BaseModelPin,
    BundlePin,
    DatasetPin,
    JobSpec,
    ReferencePin,
    ResumePoint,
    Settings,
    SourcePin,
    Telemetry,
)
from akka_training.engines.job import open_reporter, run_job
from akka_training.rewards.bundles import pack_bundle

TOKEN = "job-token-for-tests"


def put_dataset(store: BlobStore, name: str, rows: list[dict[str, Any]]) -> DatasetPin:
    data = "".join(json.dumps(row) + "\n" for row in rows).encode()
    digest = hashlib.sha256(data).hexdigest()
    key = f"datasets/sha256/{digest[:2]}/{digest}"
    store.put_bytes(key, data)
    fmt: Literal["chat", "prompt-completion", "preference"] = (
        "chat"
        if "messages" in rows[0]
        else "preference"
        if "chosen" in rows[0] or "preferred_output" in rows[0]
        else "prompt-completion"
    )
    has_images = "image" in data.decode()
    return DatasetPin(
        ref=f"test/{name}",
        name=f"test/{name}",
        version=1,
        sha256=digest,
        rows=len(rows),
        bytes=len(data),
        format=fmt,
        has_images=has_images,
        blob=key,
    )


def put_bundle(store: BlobStore, directory: Path, name: str) -> tuple[str, BundlePin]:
    """Pack and store a scoring bundle; its pinned reference and pin."""
    packed = pack_bundle(directory, 1 << 20)
    key = f"bundles/sha256/{packed.sha256[:2]}/{packed.sha256}"
    store.put_bytes(key, packed.data)
    ref = f"{name}@sha256:{packed.sha256}"
    return ref, BundlePin(name=name, version=1, sha256=packed.sha256, blob=key)


def make_spec(
    *,
    model: dict[str, Any],
    dataset: DatasetPin,
    config: dict[str, Any],
    trainer_url: str,
    store: BlobStore,
    run_id: str = "run-1",
    attempt: int = 1,
    engine: Engine = "trl",
    eval_dataset: DatasetPin | None = None,
    source: SourcePin | None = None,
    reference: ReferencePin | None = None,
    resume: ResumePoint | None = None,
    execution: dict[str, Any] | None = None,
    stall_seconds: float = 600.0,
    bundles: dict[str, BundlePin] | None = None,
) -> JobSpec:
    run_config = RunConfig.model_validate({"dataset": dataset.ref, **config})
    settings = Settings(
        project="test",
        method=run_config.method,
        engine=engine,
        base_model=BaseModelPin(
            id=model["id"],
            path=model["path"],
            revision=model["revision"],
            modality=model["modality"],
            context_length=model["contextLength"],
        ),
        dataset=dataset,
        eval_dataset=eval_dataset,
        source=source,
        reference=reference,
        bundles=bundles or {},
        config=run_config,
        execution=Execution.model_validate(execution or {}),
    )
    return JobSpec(
        run_id=run_id,
        attempt=attempt,
        project="test",
        trainer_url=trainer_url,
        storage_url=store.url,
        settings=settings,
        resume=resume,
        telemetry=Telemetry(stall_seconds=stall_seconds),
    )


def run_in_process(spec: JobSpec, workdir: Path) -> int:
    """Run a job in this process, as the entry point does (same reporter, same flow)."""
    workdir.mkdir(parents=True, exist_ok=True)
    reporter = open_reporter(spec, TOKEN)
    previous = Path.cwd()
    os.chdir(workdir)
    try:
        return run_job(spec, reporter, workdir)
    finally:
        os.chdir(previous)
        reporter.close()
