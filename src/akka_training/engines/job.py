"""The training job: ``python -m akka_training.engines.job JOB_JSON``.

JOB_JSON holds the attempt's `JobSpec`; ``AKKA_JOB_BOOTSTRAP`` holds the credential it exchanges
for the attempt's token at its start; the working directory is the attempt's job directory
(artifacts go under ``./artifacts``). One flow:

1. setup: report `started` with the placement (host, pid, pod, node, GPUs), open the job's
   telemetry (metrics.jsonl, TensorBoard, OTLP when configured) and its root span, start the
   stall watchdog, pick the engine for the run's method and engine from the registry
   (`akka_training.engines.engine.ENGINES`: TRL for sft, dpo, grpo and gspo, verl for grpo and
   gspo),
   and store the run's tokenizer beside its adapters (`tokenizer_files`);
2. train: run the engine (the `Engine` protocol); it reports `training`, every step, snapshot
   and rollout, and obeys the service's directives;
   SIGTERM (a stop from the backend, a node drained, a kill) is a save-and-stop unless the
   service answers ``stop`` (`HttpReporter.terminated`): the engine saves at the end of its step
   and the job reports `stopped` within the backend's grace period, and the run goes on from
   that snapshot (under verl, verl saves at the end of its step; past `TERMINATE_SAVE_SECONDS`
   the verl engine ends verl's processes and the run is retried from its last snapshot);
3. end (`run_engine`, the same for every engine): report `stopped` when the engine was told to
   stop, or save the final adapter (upload its directory, or take the key the engine left in the
   store) and report `finished`; an exception is reported as `failed` with its failure reason
   and detail (`failures.classify_failure`) and the job exits non-zero. A reporter whose thread
   died (`reporter.ReporterDied`) held a stop: the engine stopped at the end of its step, and
   the job reports that failure and exits non-zero rather than train on unheard. Exactly one
   end report per attempt, and none when the service has moved on from it;
4. cleanup: stop the watchdog, flush the telemetry, and keep the attempt's TensorBoard files
   with the run in the store (``runs/<run>/attempts/<n>/tensorboard/``).

With ``trainer.tracking.mlflow-uri`` set, the run is also an MLflow run
(`telemetry.tracking`): its settings, every step's figures, the final adapter with its model
card, the TensorBoard files, and its status at the end of each attempt.
"""

from __future__ import annotations

import logging
import signal
import sys
from pathlib import Path

from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

from akka_training.backends.jobfiles import remove_stored_elsewhere
from akka_training.blobstore import open_blob_store
from akka_training.core.reports import FailedReport, FinishedReport, Placement, StoppedReport
from akka_training.core.resolved import BOOTSTRAP_ENV, JobSpec
from akka_training.engines.bundles import bundle_resolver
from akka_training.engines.context import JobContext, Outcome
from akka_training.engines.engine import Engine, load_engine
from akka_training.engines.entry import USAGE, exchange, read_entry
from akka_training.engines.failures import classify_failure
from akka_training.engines.model_cache import local_model
from akka_training.engines.offline import stay_offline
from akka_training.engines.reporter import HttpReporter, StaleAttempt
from akka_training.engines.snapshots import download_adapter, upload_adapter
from akka_training.engines.tokenizer_files import store_tokenizer
from akka_training.engines.watchdog import StallWatchdog
from akka_training.telemetry import catalog as names
from akka_training.telemetry.job_metrics import JobTelemetry
from akka_training.telemetry.otel import JOB_SERVICE, job_resource_from_spec
from akka_training.telemetry.placement import detect_placement, namespace_name
from akka_training.telemetry.tracing import Tracing, job_traceparent
from akka_training.telemetry.tracking import MlflowTracking, card_facts

log = logging.getLogger("akka_training.job")


def main(argv: list[str] | None = None) -> int:
    entry = read_entry(argv, "akka_training.engines.job", "JOB_JSON", BOOTSTRAP_ENV, "the job")
    if entry is None:
        return USAGE
    spec = JobSpec.model_validate_json(entry.spec_json)
    token = exchange(entry, spec.trainer_url, "the job")
    if isinstance(token, int):
        return token
    reporter = open_reporter(spec, token)
    signal.signal(signal.SIGTERM, lambda _signum, _frame: reporter.terminated())
    try:
        return run_job(spec, reporter, Path.cwd())
    finally:
        reporter.close()
        # What it wrote is stored elsewhere now (a directory its backend marked only).
        remove_stored_elsewhere(Path.cwd())


def open_reporter(spec: JobSpec, token: str) -> HttpReporter:
    """The reporter of the attempt `spec` describes, reporting with `token`."""
    return HttpReporter(
        spec.trainer_url,
        spec.run_id,
        spec.attempt,
        token,
        report_seconds=spec.telemetry.report_seconds,
    )


def run_job(spec: JobSpec, reporter: HttpReporter, workdir: Path) -> int:
    """Run one attempt under `spec`, reporting through `reporter`; the exit status."""
    stay_offline()
    store = open_blob_store(spec.storage_url, spec.storage_s3, where="job")
    job = JobContext(spec=spec, reporter=reporter, store=store, workdir=workdir)
    job.bundles = bundle_resolver(spec.settings, store, workdir / "bundles")
    try:
        # Setup
        try:
            engine = _setup(job)
        except StaleAttempt:
            log.warning("the service moved on from this attempt; stopping")
            return 0
        except Exception as exc:
            return _report_failure(job, exc)
        assert job.tracing is not None
        root: dict[str, str | int] = {
            names.PROJECT: spec.project,
            names.RUN_ID: spec.run_id,
            names.RUN_ATTEMPT: spec.attempt,
        }
        with job.tracing.span(
            names.PREFIX + "job", root, parent=job_traceparent(spec.telemetry.traceparent)
        ):
            # Train, save and report the end
            return run_engine(job, engine)
    finally:
        # Cleanup
        if job.watchdog is not None:
            job.watchdog.stop()
        if job.telemetry is not None:
            job.telemetry.shutdown()
            keep_tensorboard(job)
        if job.tracing is not None:
            job.tracing.shutdown()


def run_engine(job: JobContext, engine: Engine) -> int:
    """Train with `engine` and send the attempt's one end report; the exit status (0 finished
    or stopped, 1 failed). Every engine ends through here."""
    try:
        outcome = engine.run(job)
        # A reporter whose thread died held a stop: the job fails, saying why.
        job.reporter.check()
        if outcome.stopped:
            job.reporter.stopped(StoppedReport(step=outcome.step))
            _track_end(job, "KILLED")
        else:
            job.reporter.finished(_finish(job, outcome))
            # After the report: the run is complete whether or not MLflow takes the adapter.
            _track_adapter(job, outcome)
            _track_end(job, "FINISHED")
        return 0
    except StaleAttempt:
        log.warning("the service moved on from this attempt; stopping")
        _track_end(job, "KILLED")
        return 0
    except Exception as exc:
        # The job's span (when one is open) records the failure, as it would an escaping error.
        span = trace.get_current_span()
        span.record_exception(exc)
        span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
        _track_end(job, "FAILED")
        return _report_failure(job, exc)


def _setup(job: JobContext) -> Engine:
    spec = job.spec
    placement = detect_placement()
    job.reporter.started(placement)
    # A worker that cannot reach the store fails now, naming the store and the settings.
    job.store.check()
    # A base model in object storage: this node's cached copy from now on.
    base = spec.settings.base_model
    base.path = local_model(base.path, spec.storage_s3)
    job.telemetry = _open_telemetry(job, placement)
    job.tracing = Tracing(
        JOB_SERVICE, _resource(spec, placement), spec.telemetry.collector_endpoint
    )
    if spec.telemetry.mlflow_uri:
        job.tracking = MlflowTracking.open(spec.telemetry.mlflow_uri, spec)
        if job.tracking is not None:
            job.telemetry.add_sink(job.tracking)
    job.watchdog = StallWatchdog(
        spec.telemetry.stall_seconds,
        job.artifacts,
        job.store,
        job.attempt_key,
        job.reporter,
        on_stall=job.telemetry.stalled,
    )
    job.watchdog.start()
    engine = load_engine(spec.settings.method, spec.settings.engine)
    # Kept beside the run's adapters, which leave the trainer with it (`runs download`).
    store_tokenizer(job.store, spec.run_id, spec.settings.base_model)
    return engine


def keep_tensorboard(job: JobContext) -> None:
    """Upload the attempt's TensorBoard files beside its other files in the store (the job's
    directory is temporary, and on a Ray worker it is on another machine), and to the run's
    MLflow run."""
    assert job.telemetry is not None
    directory = job.telemetry.tensorboard_dir
    if not directory.is_dir():
        return
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        key = job.attempt_key(f"tensorboard/{path.relative_to(directory).as_posix()}")
        try:
            job.store.put_file(key, path)
        except OSError:
            log.exception("the TensorBoard file %s could not be kept", path)
    if job.tracking is not None:
        job.tracking.tensorboard(directory)


def _track_adapter(job: JobContext, outcome: Outcome) -> None:
    if job.tracking is None:
        return
    try:
        directory = outcome.adapter_dir
        if directory is None and outcome.adapter_key is not None:
            directory = download_adapter(
                job.store, outcome.adapter_key, job.workdir / "tracked-adapter"
            )
        if directory is not None:
            facts = card_facts(job.spec, outcome.step, outcome.adapter_modules, outcome.summary)
            job.tracking.adapter(directory, facts)
    except Exception:  # the run is complete; its tracking must not undo that
        log.exception("MLflow: the adapter could not be recorded")


def _track_end(job: JobContext, status: str) -> None:
    if job.tracking is not None:
        if job.telemetry is not None:
            job.telemetry.flush()  # the last steps' figures first
        job.tracking.end(status)


def _report_failure(job: JobContext, exc: Exception) -> int:
    reason, detail = classify_failure(exc, job.spec.settings)
    log.exception("training failed (%s)", reason.value)
    job.reporter.failed(FailedReport(code=reason.value, detail=detail))
    return 1


def _open_telemetry(job: JobContext, placement: Placement) -> JobTelemetry:
    spec = job.spec
    telemetry = JobTelemetry(
        _resource(spec, placement), spec.telemetry.collector_endpoint, job.artifacts
    )
    telemetry.placement(placement.pod, placement.node, placement.gpus)
    telemetry.watch_gpus(placement.gpus)
    reward = spec.settings.config.reward
    if reward is not None and reward.terms:
        telemetry.reward_terms({term.name: term.kind for term in reward.terms})
    job.reporter.on_directive(telemetry.directive)
    return telemetry


def _resource(spec: JobSpec, placement: Placement) -> dict[str, str | int]:
    return job_resource_from_spec(
        spec, pod=placement.pod, node=placement.node, namespace=namespace_name()
    )


def _finish(job: JobContext, outcome: Outcome) -> FinishedReport:
    """The finished report, once the final adapter is in the store."""
    if outcome.adapter_key is not None:
        adapter = outcome.adapter_key
    elif outcome.adapter_dir is not None:
        upload_adapter(job.store, job.adapter_prefix, outcome.adapter_dir)
        adapter = job.adapter_prefix
    else:
        raise RuntimeError("training ended without an adapter to save")
    return FinishedReport(
        adapter=adapter,
        step=outcome.step,
        adapter_modules=outcome.adapter_modules,
        summary=outcome.summary,
    )


if __name__ == "__main__":
    sys.exit(main())
