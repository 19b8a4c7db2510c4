"""What every engine receives from the job entry point (`JobContext`), and what it hands back
(`Outcome`). The contract between them is the `Engine` protocol (`akka_training.engines.engine`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from akka_training.blobstore import BlobStore
from akka_training.core import blobkeys
from akka_training.core.reports import JobSummary
from akka_training.core.resolved import JobSpec
from akka_training.engines.bundles import BundleResolver
from akka_training.engines.reporter import HttpReporter
from akka_training.engines.watchdog import StallWatchdog
from akka_training.telemetry.job_metrics import JobTelemetry
from akka_training.telemetry.tracing import Tracing
from akka_training.telemetry.tracking import MlflowTracking


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
    # The run's MLflow run, when the deployment tracks runs in MLflow.
    tracking: MlflowTracking | None = None
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
    """How training ended, and where the final adapter is.

    `stopped`: told to stop (a pause or a cancel) before the last step; `step` is where the run
    stopped, and no adapter is needed. Otherwise the run finished at `step` and its final adapter
    is either `adapter_dir`, a local directory the entry point uploads to the run's adapter
    prefix, or `adapter_key`, a prefix already in the blob store (a snapshot's weights) that the
    entry point reports as it is. `adapter_modules` are the adapted modules' names; `summary`
    holds the run's closing figures (``loss``, ``reward``, tool counts)."""

    step: int
    stopped: bool = False
    adapter_dir: Path | None = None
    adapter_key: str | None = None
    adapter_modules: list[str] = field(default_factory=list)
    summary: JobSummary = field(default_factory=JobSummary)
