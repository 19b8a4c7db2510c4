"""Experiment tracking in MLflow: each run of the trainer is one MLflow run.

With ``trainer.tracking.mlflow-uri`` set, a job opens (or, for a resumed attempt, reopens) the
run's MLflow run in the experiment ``akka-training/<project>``:

- params: the resolved settings the run trains under, flattened (``config.rlHyperparams.
  promptsPerStep``), logged once, when the MLflow run is created;
- metrics: every step's figures at their step, as ``runs metrics`` names them;
- tags: ``akka.project``, ``akka.run.id``, ``akka.attempt`` (the latest attempt), the method,
  engine, base model and dataset, and the lineage (``akka.source.kind``, ``akka.source.run``,
  ``akka.source.snapshot``, ``akka.pipeline.id``, ``akka.pipeline.stage``, ``akka.lineage`` in
  words);
- artifacts: the final adapter (``adapter/``) with its model card (``adapter/README.md``), and
  each attempt's TensorBoard files (``tensorboard/attempt-<n>/``).

The MLflow run is found by its ``akka.run.id`` tag, so every attempt of a run (a resume, a
retry) continues the same MLflow run; its status follows the attempt (RUNNING, then FINISHED,
KILLED for a pause or a cancel, FAILED).

MLflow is optional: the client (``mlflow-skinny``, the ``tracking`` extra) is imported only
when a URI is set, and a job whose tracking server cannot be reached logs one warning and
trains without it. Metrics are sent from a background thread, so a step never waits for
MLflow.
"""

from __future__ import annotations

import functools
import logging
import math
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from akka_training.core.model_cards import CardFacts, lineage_text, model_card
from akka_training.core.reports import JobSummary
from akka_training.core.resolved import JobSpec

log = logging.getLogger(__name__)

EXPERIMENT_PREFIX = "akka-training/"
TAG_RUN = "akka.run.id"
TAG_ATTEMPT = "akka.attempt"
# MLflow's limits: a param value's length, and items per log_batch call.
_PARAM_CHARS = 6000
_BATCH = 100


def experiment_name(project: str) -> str:
    return EXPERIMENT_PREFIX + project


def flatten(value: Any, prefix: str = "") -> dict[str, str]:
    """Nested settings as dotted keys with string values (lists as JSON-ish text)."""
    out: dict[str, str] = {}
    if isinstance(value, Mapping):
        for key, inner in value.items():
            out |= flatten(inner, f"{prefix}{key}.")
        return out
    if value is None:
        return out
    out[prefix.rstrip(".")] = str(value)[:_PARAM_CHARS]
    return out


def run_tags(spec: JobSpec) -> dict[str, str]:
    settings = spec.settings
    source = settings.source
    tags = {
        "akka.project": spec.project,
        TAG_RUN: spec.run_id,
        TAG_ATTEMPT: str(spec.attempt),
        "akka.method": settings.method,
        "akka.engine": settings.engine,
        "akka.base_model": settings.base_model.id,
        "akka.dataset": f"{settings.dataset.name}:v{settings.dataset.version}",
        "akka.lineage": lineage_text(
            source.kind if source else None,
            source.run if source else None,
            source.snapshot if source else None,
            spec.pipeline,
            spec.stage,
        ),
    }
    if source is not None:
        tags["akka.source.kind"] = source.kind
        tags["akka.source.run"] = source.run
        if source.snapshot:
            tags["akka.source.snapshot"] = source.snapshot
    if spec.pipeline:
        tags["akka.pipeline.id"] = spec.pipeline
    if spec.stage:
        tags["akka.pipeline.stage"] = spec.stage
    return tags


class MlflowTracking:
    """The MLflow run of one trainer run, as the job's attempt sees it."""

    def __init__(self, client: Any, mlflow_run_id: str, spec: JobSpec, *, resumed: bool) -> None:
        self.client = client
        self.mlflow_run_id = mlflow_run_id
        self.spec = spec
        self.resumed = resumed
        self._failing = False

    @classmethod
    def open(cls, uri: str, spec: JobSpec) -> MlflowTracking | None:
        """The run's MLflow run at `uri`, created or continued; None (after a warning) when
        MLflow is not installed or does not answer."""
        try:
            from mlflow.entities import Param, RunTag
            from mlflow.tracking import MlflowClient
        except ImportError as exc:
            log.warning(
                "MLflow tracking is off: the MLflow client is not installed (%s); install "
                "akka-training[tracking] beside the training stack",
                exc,
            )
            return None
        try:
            client = MlflowClient(tracking_uri=uri)
            name = experiment_name(spec.project)
            experiment = client.get_experiment_by_name(name)
            experiment_id = (
                experiment.experiment_id if experiment else client.create_experiment(name)
            )
            found = client.search_runs(
                [experiment_id], filter_string=f"tags.`{TAG_RUN}` = '{spec.run_id}'", max_results=1
            )
            tags = run_tags(spec)
            if found:
                run_id = found[0].info.run_id
                client.update_run(run_id, status="RUNNING")
                _log_batch(client, run_id, tags=[RunTag(k, v) for k, v in tags.items()])
                resumed = True
            else:
                created = client.create_run(
                    experiment_id,
                    tags={**tags, "mlflow.runName": spec.model_name or spec.run_id},
                    run_name=spec.model_name or spec.run_id,
                )
                run_id = created.info.run_id
                params = flatten(spec.settings.model_dump(mode="json", by_alias=True))
                _log_batch(client, run_id, params=[Param(k, v) for k, v in params.items()])
                resumed = False
        except Exception as exc:  # the tracking server is optional: train without it
            log.warning("MLflow tracking is off: %s did not answer as MLflow (%s)", uri, exc)
            return None
        log.info(
            "%s MLflow run %s in experiment %s at %s",
            "continuing" if resumed else "recording",
            run_id,
            name,
            uri,
        )
        return cls(client, run_id, spec, resumed=resumed)

    # --- the sink of step figures (`telemetry.sinks.Sink`) ----------------------------------

    def log_dict(self, kind: str, step: int, figures: Mapping[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [
            Metric(name, float(value), now, step)
            for name, value in figures.items()
            if math.isfinite(float(value))
        ]
        send = functools.partial(_log_batch, self.client, self.mlflow_run_id, metrics=metrics)
        self._call("the step figures", send)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass

    # --- the end of the attempt --------------------------------------------------------------

    def adapter(self, directory: Path, facts: CardFacts) -> None:
        """The final adapter and its model card."""
        self._call(
            "the adapter", self.client.log_artifacts, self.mlflow_run_id, str(directory), "adapter"
        )
        self._call(
            "the model card",
            self.client.log_text,
            self.mlflow_run_id,
            model_card(facts),
            "adapter/README.md",
        )

    def tensorboard(self, directory: Path) -> None:
        if directory.is_dir() and any(directory.iterdir()):
            self._call(
                "the TensorBoard files",
                self.client.log_artifacts,
                self.mlflow_run_id,
                str(directory),
                f"tensorboard/attempt-{self.spec.attempt}",
            )

    def end(self, status: str) -> None:
        """FINISHED, KILLED (paused or cancelled: a resume continues it) or FAILED."""
        self._call("the run's status", self.client.set_terminated, self.mlflow_run_id, status)

    def _call(self, what: str, function: Any, *args: Any) -> None:
        try:
            function(*args)
        except Exception as exc:  # never fail training for its tracking
            if not self._failing:
                log.warning("MLflow: %s could not be recorded (%s)", what, exc)
            self._failing = True
        else:
            self._failing = False


def _log_batch(
    client: Any,
    run_id: str,
    *,
    metrics: Iterable[Any] = (),
    params: Iterable[Any] = (),
    tags: Iterable[Any] = (),
) -> None:
    for kind, items in (("metrics", list(metrics)), ("params", list(params)), ("tags", list(tags))):
        for start in range(0, len(items), _BATCH):
            client.log_batch(run_id, **{kind: items[start : start + _BATCH]})


def card_facts(spec: JobSpec, step: int, modules: list[str], summary: JobSummary) -> CardFacts:
    """The model card's facts, as the job knows them (the service's card, from the run's
    rows, says the same where both know it)."""
    settings = spec.settings
    source = settings.source
    lora = _lora(settings.model_dump(mode="json", by_alias=True))
    return CardFacts(
        name=spec.model_name or spec.run_id,
        kind="adapter",
        run_id=spec.run_id,
        project=spec.project,
        method=settings.method,
        engine=settings.engine,
        base_model=settings.base_model.id,
        public_name=settings.base_model.id,
        hub_revision=settings.base_model.revision,
        modality=settings.base_model.modality,
        dataset=settings.dataset.model_dump(mode="json", by_alias=True),
        step=step,
        snapshot=None,
        loss=summary.loss,
        reward=summary.reward,
        lineage=lineage_text(
            source.kind if source else None,
            source.run if source else None,
            source.snapshot if source else None,
            spec.pipeline,
            spec.stage,
        ),
        rank=lora.get("rank"),
        alpha=lora.get("alpha"),
        modules=modules,
        settings=settings.model_dump(mode="json", by_alias=True),
        description=None,
    )


def _lora(settings: Mapping[str, Any]) -> dict[str, Any]:
    config = settings.get("config") or {}
    for section in ("hyperparams", "rlHyperparams"):
        lora = (config.get(section) or {}).get("lora")
        if lora:
            return dict(lora)
    return {}
