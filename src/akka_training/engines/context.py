"""What every engine adapter receives from the job entry point, and what it hands back.

An engine module exposes ``run(job: JobContext) -> Outcome``: it trains under `job.spec`,
reports through `job.reporter` and writes under `job.artifacts` and `job.store`; the entry point
(`akka_training.engines.job`) reports the start, the end and any failure.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from akka_training.blobstore import BlobStore
from akka_training.core import blobkeys
from akka_training.core.resolved import JobSpec
from akka_training.engines.bundles import BundleResolver
from akka_training.engines.reporter import HttpReporter
from akka_training.engines.watchdog import StallWatchdog
from akka_training.telemetry.job_metrics import JobTelemetry
from akka_training.telemetry.tracing import Tracing


@dataclass
class JobContext:
    spec: JobSpec
    reporter: HttpReporter
    store: BlobStore
    # The attempt's job directory is the working directory; artifacts go under it.
    workdir: Path
    watchdog: StallWatchdog | None = None
    telemetry: JobTelemetry | None = None
    # Unpacks the scoring bundles the config's rule terms and tools name.
    bundles: BundleResolver | None = None
    # The job's spans (children of its root span `job`).
    tracing: Tracing | None = None
    # When the job started (time.time()), for its `job.prepare` span.
    started_at: float = field(default_factory=time.time)

    @property
    def artifacts(self) -> Path:
        path = self.workdir / "artifacts"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def snapshot_keys(self, step: int) -> blobkeys.SnapshotKeys:
        return blobkeys.snapshot_keys(self.spec.run_id, step)

    @property
    def adapter_prefix(self) -> str:
        return blobkeys.adapter_prefix(self.spec.run_id)

    def rollouts_key(self, step: int) -> str:
        return blobkeys.rollouts_key(self.spec.run_id, step)

    def attempt_key(self, name: str) -> str:
        return blobkeys.attempt_key(self.spec.run_id, self.spec.attempt, name)


@dataclass
class Outcome:
    """How training ended. `stopped`: told to stop (a pause or a cancel) before the last step;
    otherwise `adapter_dir` holds the final adapter to upload."""

    step: int
    stopped: bool = False
    adapter_dir: Path | None = None
    adapter_modules: list[str] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
