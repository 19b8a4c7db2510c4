"""The training job: ``python -m akka_training.engines.job JOB_JSON``.

JOB_JSON holds the attempt's `JobSpec`; the attempt's token is in ``AKKA_JOB_TOKEN``; the working
directory is the attempt's job directory (artifacts go under ``./artifacts``). One flow:

1. setup: report `started` with the placement (host, pid, pod, node, GPUs), open the job's
   telemetry (metrics.jsonl, TensorBoard, OTLP when configured) and its root span, start the
   stall watchdog;
2. train: run the engine for the run's method and engine; it reports `training`, every step
   and every snapshot, and obeys the service's directives;
3. save: upload the final adapter and report `finished`, or report `stopped` when told to stop;
4. cleanup: stop the watchdog, flush the telemetry.

An exception is reported as `failed` with its failure reason, and the job exits non-zero.

Engines: TRL modules expose ``run(job: JobContext) -> Outcome`` and leave the end reports to
this module; the verl engine (``akka_training.engines.verl.engine.run_verl``) sends its own and
returns the exit status.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
from pathlib import Path

from akka_training.blobstore import open_blob_store
from akka_training.core.plans import RL_METHODS
from akka_training.core.reports import FailedReport, FinishedReport, Placement, StoppedReport
from akka_training.core.resolved import JobSpec
from akka_training.engines.bundles import bundle_resolver
from akka_training.engines.context import JobContext, Outcome
from akka_training.engines.failures import classify_failure
from akka_training.engines.offline import stay_offline
from akka_training.engines.reporter import HttpReporter, StaleAttempt
from akka_training.engines.snapshots import upload_adapter
from akka_training.engines.watchdog import StallWatchdog
from akka_training.telemetry import catalog as names
from akka_training.telemetry.job_metrics import JobTelemetry
from akka_training.telemetry.otel import JOB_SERVICE, job_resource_from_spec
from akka_training.telemetry.placement import detect_placement
from akka_training.telemetry.tracing import Tracing, job_traceparent

log = logging.getLogger("akka_training.job")

TOKEN_ENV = "AKKA_JOB_TOKEN"

# The TRL engine's modules by method; each exposes ``run(job) -> Outcome``.
TRL_MODULES: dict[str, str] = {
    "sft": "akka_training.engines.trl.sft",
    "grpo": "akka_training.engines.trl.grpo",
    "gspo": "akka_training.engines.trl.grpo",
}
VERL_MODULE = "akka_training.engines.verl.engine"


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
    store = open_blob_store(spec.storage_url)
    job = JobContext(spec=spec, reporter=reporter, store=store, workdir=workdir)
    job.bundles = bundle_resolver(spec.settings, store, workdir / "bundles")
    tracing: Tracing | None = None
    try:
        # Setup
        placement = detect_placement()
        reporter.started(placement)
        job.telemetry = _open_telemetry(job, placement)
        tracing = job.tracing = Tracing(
            JOB_SERVICE,
            job_resource_from_spec(spec, pod=placement.pod, node=placement.node),
            spec.telemetry.collector_endpoint,
        )
        job.watchdog = StallWatchdog(
            spec.telemetry.stall_seconds,
            job.artifacts,
            store,
            job.attempt_key,
            reporter,
            on_stall=job.telemetry.stalled,
        )
        job.watchdog.start()
        root = {
            names.PROJECT: spec.project,
            names.RUN_ID: spec.run_id,
            names.RUN_ATTEMPT: spec.attempt,
        }
        with tracing.span(
            names.PREFIX + "job", root, parent=job_traceparent(spec.telemetry.traceparent)
        ):
            # Train, save and report the end
            if _uses_verl(spec):
                return _run_verl(job)
            outcome = importlib.import_module(TRL_MODULES[spec.settings.method]).run(job)
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
        if job.telemetry is not None:
            job.telemetry.shutdown()
        if tracing is not None:
            tracing.shutdown()


def _open_telemetry(job: JobContext, placement: Placement) -> JobTelemetry:
    spec = job.spec
    telemetry = JobTelemetry(
        job_resource_from_spec(spec, pod=placement.pod, node=placement.node),
        spec.telemetry.collector_endpoint,
        job.artifacts,
    )
    telemetry.placement(placement.pod, placement.node, placement.gpus)
    telemetry.watch_gpus(placement.gpus)
    return telemetry


def _uses_verl(spec: JobSpec) -> bool:
    return spec.settings.method in RL_METHODS and spec.settings.engine == "verl"


def _run_verl(job: JobContext) -> int:
    """The verl engine sends its own `training`, step and end reports."""
    run_verl = importlib.import_module(VERL_MODULE).run_verl
    return int(
        run_verl(
            job.spec,
            job.reporter,
            job.store,
            workdir=job.workdir / "verl",
            bundle_resolver=job.bundles,
            telemetry=job.telemetry,
        )
    )


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
