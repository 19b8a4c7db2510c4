"""A training job's metrics: what the engines call after each step, and where it goes.

`JobTelemetry` owns the job's meter provider (resource: run, attempt, project, and pipeline,
stage, pod, node where known), exports over OTLP/HTTP when a collector endpoint is set, and
always writes every step's figures to ``metrics.jsonl`` and TensorBoard in the artifacts
directory.

What an engine calls::

    telemetry = JobTelemetry(job_resource_from_spec(spec, pod=p.pod, node=p.node),
                             spec.telemetry.collector_endpoint, artifacts_dir)
    telemetry.placement(p.pod, p.node, p.gpus)
    telemetry.watch_gpus(p.gpus)                  # GPU health; logs once and does nothing without NVML
    telemetry.data_fit(rows_truncated=18, answers_truncated=3, rows_dropped=0)
    telemetry.reward_terms({"correct": "match", "judge": "judge"})  # failure counters at 0
    telemetry.training("rl")                      # phase TRAINING; the step counter starts at 0
    telemetry.step("rl", 1, {"reward/mean": 0.4, "timing/generation": 2.1, ...})
    telemetry.reward_stats(timings={"judge": [0.8, 1.2]}, failures={("judge", "timeout"): 1},
                           judge_prompt_tokens={"judge": 900}, judge_completion_tokens={"judge": 40},
                           retries={"judge": 2})
    telemetry.histograms({"reward": [...], "reward/correct": [...], "completion_length": [...]})
    telemetry.shutdown()

The figure names a step reports map onto catalog metrics as `akka_training.telemetry.figures`
documents in its table (the generated reference repeats it): for example ``loss`` ->
``sft.loss``, ``timing/generation`` -> ``rl.step.timing{step.phase=generation}``,
``terms/<term>/share_mean`` -> ``rl.term.share.mean{reward.term=<term>}``, ``memory/<part>`` ->
``memory.peak{memory.part=<part>}``. A figure outside the table is written to the files only.

Step gauges keep their last value between steps (and after the last one); the step counter is
what an alert watches. Counters start at 0 for every attribute set known in advance (the step
counter at `training`, the reward terms' failures and judge tokens at `reward_terms`), so
Prometheus's ``increase()`` sees their first increment. ``job.phase`` follows the job
(PREPARING, TRAINING, PAUSING) and is 0 for every phase in the last export at `shutdown`, so
a finished job is not taken for a stalled one.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry.metrics import CallbackOptions, Meter, Observation
from opentelemetry.sdk.metrics._internal.measurement import Measurement
from opentelemetry.sdk.metrics.export import MetricReader

from akka_training.core.phases import Phase
from akka_training.core.reports import Gpu
from akka_training.telemetry import catalog as c
from akka_training.telemetry.figures import Kind, histogram_route, route
from akka_training.telemetry.gpu import GPU_HEALTH_METRICS, GpuHealth
from akka_training.telemetry.otel import (
    JOB_SERVICE,
    METER_NAME,
    ResourceValue,
    check_job_resource,
    create_instruments,
    make_resource,
    meter_provider,
)
from akka_training.telemetry.sinks import TENSORBOARD_DIR, BackgroundSinks, Sink, open_sinks

log = logging.getLogger(__name__)

# The phases a job itself can be in.
JOB_PHASES = (Phase.PREPARING, Phase.TRAINING, Phase.PAUSING)
# Instruments read by callbacks (made here) or owned by GpuHealth.
_HEARTBEAT = c.PREFIX + "job.heartbeat.timestamp"
_NOT_SYNCHRONOUS = {_HEARTBEAT, *GPU_HEALTH_METRICS}
# Reward term kinds that call out (a judge model, an HTTP evaluator): every failure cause can
# occur; other kinds fail only with an error in their own code.
_REMOTE_TERMS = ("judge", "http")


class JobTelemetry:
    def __init__(
        self,
        resource_attrs: Mapping[str, ResourceValue],
        collector_endpoint: str | None,
        artifacts_dir: Path | str,
        *,
        export_interval_s: float = 10.0,
        metric_readers: Sequence[MetricReader] = (),
        tensorboard: bool = True,
    ) -> None:
        """`resource_attrs`: from `otel.job_resource` (run, attempt and project required).
        `metric_readers`: extra readers (tests, or a Prometheus reader for a local job)."""
        check_job_resource(resource_attrs)
        self.artifacts_dir = Path(artifacts_dir)
        self._provider = meter_provider(
            make_resource(JOB_SERVICE, resource_attrs),
            collector_endpoint,
            metric_readers,
            export_interval_s=export_interval_s,
        )
        self.meter: Meter = self._provider.get_meter(METER_NAME)
        specs = [m for m in c.metrics_of(c.Publisher.JOB) if m.name not in _NOT_SYNCHRONOUS]
        self._m: dict[str, Any] = create_instruments(self.meter, specs)
        heartbeat = c.metric(_HEARTBEAT)
        self.meter.create_observable_gauge(
            heartbeat.name,
            callbacks=[_heartbeat],
            unit=heartbeat.unit,
            description=heartbeat.description,
        )
        self._sinks: list[Sink] = open_sinks(self.artifacts_dir, tensorboard=tensorboard)
        self._lock = threading.Lock()
        self._gpu_health: GpuHealth | None = None
        self._closed = False
        self.current_phase: Phase | None = None
        self.phase(Phase.PREPARING)
        self.stalled(False)

    # --- the job's state ----------------------------------------------------------------------

    def phase(self, phase: Phase | str | None) -> None:
        """Set ``job.phase``: 1 for `phase`, 0 for the job's other phases (None: 0 for every
        phase, as at exit)."""
        current = Phase(phase) if phase is not None else None
        if current is not None and current not in JOB_PHASES:
            raise ValueError(f"a job is never in {current.value}; its phases are {JOB_PHASES}")
        self.current_phase = current
        for p in JOB_PHASES:
            self._m[c.PREFIX + "job.phase"].set(1 if p is current else 0, {c.RUN_PHASE: p.value})

    def directive(self, action: str) -> None:
        """The service's latest directive: a save-and-stop (a pause) puts the job in
        PAUSING until it exits."""
        if action == "save-and-stop" and self.current_phase is not Phase.PAUSING:
            self.phase(Phase.PAUSING)

    def reward_terms(self, kinds: Mapping[str, str]) -> None:
        """Publish the reward counters at 0 for the run's terms (name -> kind): failures by
        every cause a term of that kind can fail with, and a judge's input and output
        tokens."""
        p = c.PREFIX
        for term, kind in kinds.items():
            causes = c.REWARD_FAILURE_CAUSES if kind in _REMOTE_TERMS else ("error",)
            for cause in causes:
                attrs = {c.REWARD_TERM: term, c.REWARD_FAILURE_CAUSE: cause}
                self._m[p + "reward.term.failures"].add(0, attrs)
            if kind in _REMOTE_TERMS:
                self._m[p + "reward.term.retries"].add(0, {c.REWARD_TERM: term})
            if kind == "judge":
                for side in c.TOKEN_TYPES:
                    self._m[p + "reward.judge.tokens"].add(
                        0, {c.REWARD_TERM: term, c.TOKEN_TYPE: side}
                    )

    def training(self, kind: Kind) -> None:
        """The job starts training: phase TRAINING, and the kind's step counter is published
        at 0 so a job that never completes a step is caught by the stalled-run alert. They
        are exported at once, from a thread of their own (training does not wait for the
        collector): a counter's 0 that went only with the first periodic export came after
        the first steps, and Prometheus' ``increase()`` missed them."""
        self.phase(Phase.TRAINING)
        self._counter(kind).add(0)
        threading.Thread(
            target=self._provider.force_flush,
            kwargs={"timeout_millis": 10_000},
            name="akka-telemetry-zeros",
            daemon=True,
        ).start()

    def stalled(self, is_stalled: bool) -> None:
        """Set by the job's watchdog when no step completed within its stall limit."""
        self._m[c.PREFIX + "job.stalled"].set(1 if is_stalled else 0)

    def add_sink(self, sink: Sink) -> None:
        """Another receiver of every step's figures (the run's MLflow run), written from a
        thread of its own."""
        with self._lock:
            self._sinks.append(BackgroundSinks([sink]))

    @property
    def tensorboard_dir(self) -> Path:
        return self.artifacts_dir / TENSORBOARD_DIR

    # --- per step ------------------------------------------------------------------------------

    def step(self, kind: Kind, step: int, figures: Mapping[str, float]) -> None:
        """One completed step: +1 on the step counter, the step gauges, the phase timings, and
        a line in metrics.jsonl and TensorBoard with every figure."""
        self._counter(kind).add(1)
        self._m[c.PREFIX + "step.latest"].set(step)
        for name, value in figures.items():
            target = route(kind, name)
            if target is None:
                continue
            instrument = self._m[target.metric]
            if c.metric(target.metric).instrument is c.Instrument.HISTOGRAM:
                if math.isfinite(value):
                    instrument.record(float(value), dict(target.attributes))
            else:
                instrument.set(float(value), dict(target.attributes))
        with self._lock:
            for sink in self._sinks:
                sink.log_dict(kind, step, figures)

    def data_fit(
        self,
        *,
        rows_truncated: int,
        answers_truncated: int,
        rows_dropped: int,
        padding_share: float | None = None,
    ) -> None:
        """The dataset's fit at maxSeqLength, counted once after tokenising."""
        p = c.PREFIX
        self._m[p + "data.rows.truncated"].set(rows_truncated)
        self._m[p + "data.answers.truncated"].set(answers_truncated)
        self._m[p + "data.rows.dropped"].set(rows_dropped)
        if padding_share is not None:
            self._m[p + "data.padding.ratio"].set(padding_share)

    def reward_stats(
        self,
        *,
        timings: Mapping[str, Iterable[float]] | None = None,
        failures: Mapping[tuple[str, str], int] | None = None,
        judge_prompt_tokens: Mapping[str, int] | None = None,
        judge_completion_tokens: Mapping[str, int] | None = None,
        retries: Mapping[str, int] | None = None,
    ) -> None:
        """A step's reward scoring, as the scorer accounts for a batch: `timings`, seconds per
        scored rollout by term; `failures`, rollouts not scored by (term, cause), cause one of
        `catalog.REWARD_FAILURE_CAUSES`; the tokens each judge term's model read and wrote;
        `retries`, the tries each remote term made again after a 429 or 5xx."""
        p = c.PREFIX
        for term, count in (retries or {}).items():
            if count:
                self._m[p + "reward.term.retries"].add(count, {c.REWARD_TERM: term})
        for term, seconds in (timings or {}).items():
            for value in seconds:
                self._m[p + "reward.term.timing"].record(float(value), {c.REWARD_TERM: term})
        for (term, cause), count in (failures or {}).items():
            if cause not in c.REWARD_FAILURE_CAUSES:
                raise ValueError(
                    f"reward failure cause {cause!r} is not one of {c.REWARD_FAILURE_CAUSES}"
                )
            if count:
                attrs = {c.REWARD_TERM: term, c.REWARD_FAILURE_CAUSE: cause}
                self._m[p + "reward.term.failures"].add(count, attrs)
        for side, by_term in (
            ("input", judge_prompt_tokens or {}),
            ("output", judge_completion_tokens or {}),
        ):
            for term, count in by_term.items():
                if count:
                    attrs = {c.REWARD_TERM: term, c.TOKEN_TYPE: side}
                    self._m[p + "reward.judge.tokens"].add(count, attrs)

    def histograms(self, values_by_name: Mapping[str, Iterable[float]]) -> None:
        """Per-rollout values of a step: ``reward`` (scores), ``reward/<term>`` (each term's
        share), ``completion_length``. A name outside these is refused (ValueError)."""
        for name, values in values_by_name.items():
            target = histogram_route(name)
            if target is None:
                raise ValueError(
                    f"no histogram for {name!r}: use reward, reward/<term> or completion_length"
                )
            instrument = self._m[target.metric]
            attrs = dict(target.attributes)
            for value in values:
                if math.isfinite(value):
                    record_signed(instrument, float(value), attrs)

    # --- GPUs ------------------------------------------------------------------------------------

    def placement(self, pod: str | None, node: str | None, gpus: Sequence[Gpu]) -> None:
        """``gpu.placement`` = 1 for each GPU this process uses (with a UUID to join on)."""
        for gpu in gpus:
            if gpu.uuid is None:
                continue
            attrs: dict[str, str | int] = {c.GPU_UUID: gpu.uuid, c.GPU_INDEX: gpu.index}
            if pod:
                attrs[c.POD] = pod
            if node:
                attrs[c.NODE] = node
            self._m[c.PREFIX + "gpu.placement"].set(1, attrs)

    def watch_gpus(
        self, gpus: Sequence[Gpu], *, nvml: Any | None = None, interval_s: float = 15.0
    ) -> GpuHealth:
        """Start sampling the health of `gpus` (by UUID, else index). Without NVML this logs
        once that GPU health is off and publishes nothing."""
        keys: list[str | int] = [g.uuid if g.uuid else g.index for g in gpus]
        health = GpuHealth(self.meter, keys, nvml=nvml, interval_s=interval_s)
        if gpus:
            health.start()
        else:
            log.info("GPU health is off: this process uses no GPU")
        self._gpu_health = health
        return health

    # --- lifecycle -------------------------------------------------------------------------------

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Write the files out and export now; False when the export did not finish."""
        with self._lock:
            for sink in self._sinks:
                sink.flush()
        return self._provider.force_flush(timeout_millis=int(timeout_s * 1000))

    def shutdown(self) -> None:
        """Stop GPU sampling, export a last time and close the files. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._gpu_health is not None:
            self._gpu_health.close()
        # The job exits: no phase holds any more (the provider's last export carries the 0s).
        self.phase(None)
        self.stalled(False)
        with self._lock:
            for sink in self._sinks:
                sink.close()
        self._provider.shutdown()

    def _counter(self, kind: Kind) -> Any:
        if kind not in ("sft", "rl"):
            raise ValueError(f"step kind {kind!r} is not sft or rl")
        return self._m[f"{c.PREFIX}{kind}.step.count"]


def record_signed(histogram: Any, value: float, attributes: dict[str, Any]) -> None:
    """Record `value` in `histogram`, below 0 too. A reward or term share is negative under a
    penalty term, and the catalog's explicit buckets below 0 are there for it; OpenTelemetry's
    Python SDK drops a negative value at ``Histogram.record`` (the data model and the bucket
    aggregation take it), so a negative one goes to the SDK's measurement consumer, as
    ``record`` hands a positive one."""
    if value >= 0:
        histogram.record(value, attributes)
        return
    consumer = getattr(histogram, "_measurement_consumer", None)
    if consumer is None:  # another SDK: it has its own rule
        histogram.record(value, attributes)
        return
    consumer.consume_measurement(
        Measurement(value, time.time_ns(), histogram, otel_context.get_current(), attributes)
    )


def _heartbeat(_options: CallbackOptions) -> Iterable[Observation]:
    return [Observation(time.time())]
