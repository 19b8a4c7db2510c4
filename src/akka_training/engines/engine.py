"""The `Engine` protocol every training engine implements, and the registry the job entry point
picks one from.

An engine trains one attempt of a run. The entry point (`akka_training.engines.job`) has already
reported ``started``, opened the job's telemetry and started the stall watchdog when it calls
``engine.run(job)``; after it returns, the entry point sends the attempt's one end report
(``finished``, ``stopped`` or ``failed``). An engine never sends an end report itself.

Register a new engine in `ENGINES` under each (method, engine) pair it trains, as the path of a
class the entry point constructs without arguments; `tests/engines/test_engine.py` checks that
each one satisfies the protocol.
"""

from __future__ import annotations

import importlib
from typing import Protocol, runtime_checkable

from akka_training.engines.context import JobContext, Outcome
from akka_training.engines.failures import JobError

# (method, engine) -> "module:Class". Imported only when a job needs it: a verl job never
# imports TRL, and a TRL job never imports the verl adapter.
ENGINES: dict[tuple[str, str], str] = {
    ("sft", "trl"): "akka_training.engines.trl.sft:SftEngine",
    ("dpo", "trl"): "akka_training.engines.trl.dpo:DpoEngine",
    ("grpo", "trl"): "akka_training.engines.trl.grpo:GrpoEngine",
    ("gspo", "trl"): "akka_training.engines.trl.grpo:GrpoEngine",
    ("grpo", "verl"): "akka_training.engines.verl.engine:VerlEngine",
    ("gspo", "verl"): "akka_training.engines.verl.engine:VerlEngine",
}


@runtime_checkable
class Engine(Protocol):
    """One way of training an attempt: ``run(job) -> Outcome``.

    **What it receives.** `job` (`JobContext`): the resolved plan (`job.spec`: settings, the
    resume point, telemetry settings), the reporter (`job.reporter`), the blob store
    (`job.store`), the job directory (`job.workdir`; local files under `job.artifacts`), the
    scoring bundles' resolver (`job.bundles`), and, when the entry point opened them, the job's
    telemetry (`job.telemetry`), spans (`job.tracing`) and stall watchdog (`job.watchdog`).

    **What it reports, and when.** Through `job.reporter`, in this order:

    - ``training`` once, before the first step: the total steps, the data fit, the adapted
      modules; then, as the first step begins, `StepPipeline.begin` (the telemetry's phase
      and step counter, the stall watchdog's clock, the job's preparation span);
    - every optimizer step through the job's step pipeline
      (`akka_training.engines.step_pipeline`, `StepPipeline.for_job`): `check` lets the health
      monitors see its figures before the engine decides whether the step saves, `finish`
      sends the ``steps`` report with its figures (named as `akka_training.telemetry.catalog`
      routes them), publishes them to the job's telemetry, hands the step's rollouts (grpo
      and gspo) to the step files (a ``rollouts`` report after the step's), reports the
      snapshot taken at the step, feeds the stall watchdog (a job that keeps stepping is
      never taken for stalled) and records the step's span, in that order;
    - every snapshot (every ``execution.saveEvery`` steps, and on a save-and-stop) once its
      weights and training state are in the store under `job.snapshot_keys(step)`, after the
      step it saved was reported.

    **How it obeys the service.** After every step it obeys `job.reporter.action` (what
    `StepPipeline.finish` returns), which only the reporter changes: ``stop``
    ends training at once (no save); ``save-and-stop`` saves a snapshot at the end of the
    current step, then ends training. Told either before the last step, it returns a stopped
    `Outcome`; told at the last step, the run has finished all the same.

    **What it returns.** An `Outcome`: ``stopped=True`` with the step it stopped at, or the
    step it finished at with the final adapter, either a local directory for the entry point
    to upload (`adapter_dir`) or a key already in the store (`adapter_key`, such as the last
    snapshot's weights), plus the adapted modules and a closing summary.

    **How it fails.** It raises. A `JobError` subclass (`akka_training.engines.failures`)
    carries the `FailureReason` the engine recognised and its message is the detail the user
    reads after the reason's sentence; the entry point classifies any other exception
    (out of memory, a wrapped `JobError`, else a training error with its traceback). A
    `StaleAttempt` from the reporter (the service moved on) ends the job quietly.
    """

    def run(self, job: JobContext) -> Outcome: ...


class NoEngine(JobError):
    """The plan names a method and engine that no registered engine trains."""


def load_engine(method: str, engine: str) -> Engine:
    """The registered engine for `method` on `engine`."""
    path = ENGINES.get((method, engine))
    if path is None:
        by_method: dict[str, list[str]] = {}
        for m, e in ENGINES:
            by_method.setdefault(m, []).append(e)
        trained = "; ".join(f"{m} on {' or '.join(es)}" for m, es in by_method.items())
        raise NoEngine(
            f"no engine trains {method} on {engine} (this job trains {trained}): "
            "resubmit the run so that its plan is resolved again"
        )
    module, name = path.split(":")
    made: Engine = getattr(importlib.import_module(module), name)()
    return made
