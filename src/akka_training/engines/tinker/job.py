"""The job of an interactive run: ``python -m akka_training.engines.tinker.job JOB_JSON``.

JOB_JSON holds the attempt's `InteractiveJobSpec`; it starts like every job (`engines.entry`: the
bootstrap credential exchanged for the attempt's token), then:

1. loads the base model with the LoRA adapter the client asked for (`model.LoraModel`);
2. opens its API on this node's address towards the trainer (`engines.reachable`) and reports
   ``started`` with the API's address and key in its placement, then ``training``: the service
   routes the run's requests to it from then on;
3. runs the requests in order until the session ends (``/shutdown``) or the service says stop;
   every ``optim_step`` is a step of the run (its figures in a ``steps`` report), every
   ``save_weights`` a snapshot (``tinker://RUN/weights/NAME`` is the snapshot NAME of RUN), every
   ``save_weights_for_sampler`` an adapter added to the sampler's engine (`sampler.Sampler`),
   and samples run on that engine beside the queue;
4. ends: ``finished`` with the adapter as it stands when the session ended, ``stopped`` when the
   run was cancelled, ``failed`` with the reason when anything else broke.
"""

from __future__ import annotations

import json
import logging
import re
import secrets
import signal
import sys
from pathlib import Path
from typing import Any

from akka_training.blobstore import open_blob_store
from akka_training.blobstore.base import BlobStore
from akka_training.core import blobkeys
from akka_training.core.interactive import InteractiveJobSpec
from akka_training.core.reports import (
    FailedReport,
    FinishedReport,
    SnapshotReport,
    StepReport,
    StoppedReport,
    TrainingReport,
)
from akka_training.core.resolved import BOOTSTRAP_ENV
from akka_training.engines.entry import USAGE, exchange, read_entry
from akka_training.engines.model_cache import local_model
from akka_training.engines.offline import stay_offline
from akka_training.engines.reachable import listen_host
from akka_training.engines.reporter import HttpReporter, StaleAttempt
from akka_training.engines.snapshots import upload_adapter
from akka_training.engines.tinker.api import JSON, PROTOBUF, JobApi, RequestQueue, Result, Work
from akka_training.engines.tinker.model import AdamParams, LoraModel, discard, scratch
from akka_training.engines.tinker.sampler import Sampler, sampling_session_id
from akka_training.engines.tinker.wire import read_forward_backward, write_output
from akka_training.engines.tokenizer_files import store_tokenizer
from akka_training.telemetry.placement import detect_placement

log = logging.getLogger("akka_training.tinker")

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
WEIGHTS_PATH = re.compile(r"^tinker://([^/]+)/weights/([^/]+)$")


def main(argv: list[str] | None = None) -> int:
    module = "akka_training.engines.tinker.job"
    entry = read_entry(argv, module, "JOB_JSON", BOOTSTRAP_ENV, "the job")
    if entry is None:
        return USAGE
    spec = InteractiveJobSpec.model_validate_json(entry.spec_json)
    token = exchange(entry, spec.trainer_url, "the job")
    if isinstance(token, int):
        return token
    reporter = HttpReporter(
        spec.trainer_url,
        spec.run_id,
        spec.attempt,
        token,
        report_seconds=spec.telemetry.report_seconds,
    )
    signal.signal(signal.SIGTERM, lambda _signum, _frame: reporter.terminated())
    try:
        return serve(spec, reporter)
    finally:
        reporter.close()


def serve(spec: InteractiveJobSpec, reporter: HttpReporter) -> int:
    stay_offline()
    store = open_blob_store(spec.storage_url, spec.storage_s3, where="job")
    session = Session(spec, reporter, store)
    try:
        store.check()
        base = spec.settings.base_model.model_copy()
        base.path = local_model(base.path, spec.storage_s3)
        # Kept beside the run's adapters, which leave the trainer with it (`runs download`).
        store_tokenizer(store, spec.run_id, base)
        path = base.path
        session.model = LoraModel(path, spec.settings.lora)
        model = session.model
        session.sampler = Sampler(spec.run_id, Path(path), str(model.device), model.shared_base)
        source = spec.settings.source
        if source is not None:
            session.load(source.path, source.optimizer)
        key = secrets.token_urlsafe(24)
        host = listen_host(spec.trainer_url)
        api = JobApi(session.queue, key, host, samples=session.sampler).start()
        try:
            placement = detect_placement()
            placement.api_url, placement.api_key = api.url, api.key
            reporter.started(placement)
            reporter.training(TrainingReport(adapter_modules=session.model.modules))
            session.queue.serve(check=lambda: reporter.action != "continue")
        finally:
            api.close()
            session.sampler.close()
        reporter.check()
        if reporter.action != "continue":
            reporter.stopped(StoppedReport(step=session.model.step))
            return 0
        reporter.finished(session.finish())
        return 0
    except StaleAttempt:
        log.warning("the service moved on from this attempt; stopping")
        return 0
    except Exception as exc:
        log.exception("the interactive run failed")
        reporter.failed(FailedReport(code="training-error", detail=f"{type(exc).__name__}: {exc}"))
        return 1


class Session:
    """What the requests of one run act on: its model, its store, its reporter."""

    def __init__(self, spec: InteractiveJobSpec, reporter: HttpReporter, store: BlobStore) -> None:
        self.spec = spec
        self.reporter = reporter
        self.store = store
        self.model: LoraModel | None = None
        self.sampler: Sampler | None = None
        self.queue = RequestQueue(spec.run_id, self.run)

    def run(self, work: Work) -> Result:
        model = self.model
        assert model is not None
        if work.kind == "forward_backward":
            request = read_forward_backward(work.body)
            outputs, metrics = model.forward_backward(request)
            return Result(PROTOBUF, write_output(outputs, metrics))
        body: dict[str, Any] = json.loads(work.body)
        if work.kind == "optim_step":
            params = body.get("adam_params") or body.get("optim_params") or {}
            figures = model.optim_step(AdamParams.of(params))
            self.reporter.report_step(StepReport(step=model.step, metrics=figures))
            return _json({"metrics": figures})
        if work.kind == "save_weights":
            name = str(body.get("path") or f"step-{model.step}")
            if not NAME.match(name):
                raise ValueError(
                    f"{name!r} is not a snapshot name: use letters, digits, '.', '_' and '-'"
                )
            self.save(name)
            return _json(
                {"path": f"tinker://{self.spec.run_id}/weights/{name}", "type": "save_weights"}
            )
        if work.kind == "save_weights_for_sampler":
            return _json(self.save_for_sampler(body.get("path"), work.seq_id))
        if work.kind == "load_weights":
            path = str(body.get("path", ""))
            self.load(path, bool(body.get("optimizer")))
            return _json({"path": path, "model_id": self.spec.run_id, "type": "load_weights"})
        raise ValueError(f"no request {work.kind!r}")

    def save_for_sampler(self, path: Any, seq_id: int) -> dict[str, Any]:
        """The adapter as it stands, added to the sampler's engine: under `path` when the client
        named it (its path is ``tinker://RUN/sampler_weights/NAME``), else as ``sampler-SEQ``
        (the answer is then the id of its sampling session)."""
        assert self.model is not None and self.sampler is not None
        name = str(path) if path else f"sampler-{seq_id}"
        if not NAME.match(name):
            raise ValueError(
                f"{name!r} is not a name of sampler weights: use letters, digits, '.', '_' and '-'"
            )
        directory = self.sampler.adapter_dir()
        self.model.model.save_pretrained(str(directory))
        self.sampler.add(name, directory)
        if path:
            return {
                "path": f"tinker://{self.spec.run_id}/sampler_weights/{name}",
                "type": "save_weights_for_sampler",
            }
        return {
            "sampling_session_id": sampling_session_id(self.spec.run_id, name),
            "type": "save_weights_for_sampler",
        }

    def save(self, name: str) -> None:
        assert self.model is not None
        local = scratch()
        try:
            weights, state = self.model.save(local)
            prefix = blobkeys.snapshot_prefix(self.spec.run_id, name)
            self.store.put_dir(f"{prefix}weights/", weights)
            self.store.put_dir(f"{prefix}training-state/", state)
        finally:
            discard(local)
        self.reporter.snapshot(
            SnapshotReport(
                name=name,
                step=self.model.step,
                weights=f"{prefix}weights/",
                training_state=f"{prefix}training-state/",
            )
        )

    def load(self, path: str, optimizer: bool) -> None:
        """`path` is ``tinker://RUN/weights/NAME``, a snapshot the service checked the caller
        may read."""
        assert self.model is not None
        found = WEIGHTS_PATH.match(path)
        if found is None:
            raise ValueError(f"{path!r} is not a path of saved weights (tinker://RUN/weights/NAME)")
        prefix = blobkeys.snapshot_prefix(found.group(1), found.group(2))
        local = scratch()
        try:
            weights = self.store.get_dir(f"{prefix}weights/", local / "weights")
            state = None
            if optimizer:
                state = self.store.get_dir(f"{prefix}training-state/", local / "state")
            self.model.load(weights, state)
        finally:
            discard(local)

    def finish(self) -> FinishedReport:
        assert self.model is not None
        local = scratch()
        try:
            weights, _ = self.model.save(local)
            prefix = blobkeys.adapter_prefix(self.spec.run_id)
            upload_adapter(self.store, prefix, weights)
        finally:
            discard(local)
        return FinishedReport(
            adapter=prefix, step=self.model.step, adapter_modules=self.model.modules
        )


def _json(body: dict[str, Any]) -> Result:
    return Result(JSON, json.dumps(body).encode())


if __name__ == "__main__":
    sys.exit(main())
