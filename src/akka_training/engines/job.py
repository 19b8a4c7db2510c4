"""The training job: ``python -m akka_training.engines.job JOB_JSON``.

JOB_JSON holds the attempt's `JobSpec`; the attempt's token is in ``AKKA_JOB_TOKEN``; the working
directory is the attempt's job directory (artifacts go under ``./artifacts``). One flow:

1. report `started` with the placement (host, pid, pod, node, GPUs);
2. run the engine for the run's method and engine (it reports `training`, every step and every
   snapshot, and obeys the service's directives);
3. upload the final adapter and report `finished`, or report `stopped` when told to stop;
4. on an exception, report `failed` with its failure reason and exit non-zero.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path

from akka_training.blobstore import open_blob_store
from akka_training.core.plans import RL_METHODS
from akka_training.core.reports import FailedReport, FinishedReport, StoppedReport
from akka_training.core.resolved import JobSpec
from akka_training.engines.context import JobContext, Outcome
from akka_training.engines.failures import classify_failure
from akka_training.engines.offline import stay_offline
from akka_training.engines.placement import current_placement
from akka_training.engines.reporter import HttpReporter, StaleAttempt
from akka_training.engines.snapshots import upload_adapter
from akka_training.engines.watchdog import StallWatchdog

log = logging.getLogger("akka_training.job")

TOKEN_ENV = "AKKA_JOB_TOKEN"

# Each engine module exposes ``run(job: JobContext) -> Outcome``; imported on demand so that a
# job loads only its own engine's libraries.
ENGINE_MODULES: dict[tuple[str, str], str] = {
    ("trl", "sft"): "akka_training.engines.trl.sft",
    ("trl", "grpo"): "akka_training.engines.trl.grpo",
    ("trl", "gspo"): "akka_training.engines.trl.grpo",
    ("verl", "grpo"): "akka_training.engines.verl",
    ("verl", "gspo"): "akka_training.engines.verl",
}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m akka_training.engines.job JOB_JSON", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    token = os.environ.get(TOKEN_ENV, "").strip()
    if not token:
        # Without its token the job cannot report anything, not even its failure.
        print(f"{TOKEN_ENV} is not set: the job cannot report to the service", file=sys.stderr)
        return 2
    spec = JobSpec.model_validate_json(Path(args[0]).read_text())
    reporter = HttpReporter(spec.trainer_url, spec.run_id, spec.attempt, token)
    try:
        return run_job(spec, reporter, Path.cwd())
    finally:
        reporter.close()


def run_job(spec: JobSpec, reporter: HttpReporter, workdir: Path) -> int:
    """Run one attempt under `spec`, reporting through `reporter`; the exit status."""
    stay_offline()
    job = JobContext(
        spec=spec, reporter=reporter, store=open_blob_store(spec.storage_url), workdir=workdir
    )
    try:
        # Setup
        reporter.started(current_placement())
        job.watchdog = StallWatchdog(
            spec.telemetry.stall_seconds, job.artifacts, job.store, job.attempt_key, reporter
        )
        job.watchdog.start()

        # Train
        outcome = engine_for(spec)(job)

        # Save and report the end
        if outcome.stopped:
            reporter.stopped(StoppedReport(step=outcome.step))
            return 0
        reporter.finished(_finish(job, outcome))
        return 0
    except StaleAttempt:
        log.warning("the service moved on from this attempt; stopping")
        return 0
    except Exception as exc:
        reason, detail = classify_failure(exc, spec.settings)
        log.exception("training failed (%s)", reason.value)
        reporter.failed(FailedReport(code=reason.value, detail=detail))
        return 1
    finally:
        # Cleanup
        if job.watchdog is not None:
            job.watchdog.stop()


def engine_for(spec: JobSpec) -> Callable[[JobContext], Outcome]:
    settings = spec.settings
    engine = settings.engine if settings.method in RL_METHODS else "trl"
    module = ENGINE_MODULES[(engine, settings.method)]
    return importlib.import_module(module).run


def _finish(job: JobContext, outcome: Outcome) -> FinishedReport:
    if outcome.adapter_dir is None:
        raise RuntimeError("training ended without an adapter to save")
    upload_adapter(job.store, job.adapter_prefix, outcome.adapter_dir)
    return FinishedReport(
        adapter=job.adapter_prefix,
        step=outcome.step,
        adapter_modules=outcome.adapter_modules,
        summary=outcome.summary,
    )


if __name__ == "__main__":
    sys.exit(main())
