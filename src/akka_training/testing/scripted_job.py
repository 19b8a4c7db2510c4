"""`python -m akka_training.testing.scripted_job JOB_JSON`: a job that trains nothing.

For tests of the controller, the backends and the CLI only (a deployment selects it with
``trainer.testing.scripted-jobs: true``; the engines replace it in every user path). It is a real
child process that speaks the real job protocol: it reports placement, steps with a
deterministic loss, snapshots (real files in the blob store) and its end, and obeys the service's
directives. A run whose ``modelName`` is ``scripted:MODE`` misbehaves on purpose:

- ``exit-without-report``: exits 0 at step 2 without a word;
- ``crash``: prints a traceback-like line and exits 3 at step 2;
- ``device-oom`` / ``host-oom``: prints the error PyTorch would print and exits 1 at step 2;
- ``sigkill``: kills itself with SIGKILL at step 2 (as the OOM killer would);
- ``hang``: stops completing steps after step 2 but stays alive.

``AKKA_SCRIPTED_STEP_SECONDS`` sets the time per step (default 0.2).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time
from pathlib import Path

from akka_training.blobstore import open_blob_store
from akka_training.core import blobkeys
from akka_training.core.plans import RL_METHODS
from akka_training.core.reports import (
    FinishedReport,
    Placement,
    SnapshotReport,
    StepReport,
    StoppedReport,
    TrainingReport,
)
from akka_training.core.resolved import BOOTSTRAP_ENV, JobSpec
from akka_training.engines.entry import USAGE, exchange, read_entry
from akka_training.engines.reporter import HttpReporter

# A safetensors file that holds no tensors: its 8-byte header length, then the header `{}`.
EMPTY_SAFETENSORS = (2).to_bytes(8, "little") + b"{}"


def main(path: str) -> int:
    spec = JobSpec.model_validate(json.loads(Path(path).read_text()))
    # As the job's entry point: its credentials come from its bootstrap credential, once.
    entry = read_entry(
        [path], "akka_training.testing.scripted_job", "JOB_JSON", BOOTSTRAP_ENV, "the job"
    )
    if entry is None:
        return USAGE
    token = exchange(entry, spec.trainer_url, "the job")
    if isinstance(token, int):
        return token
    mode = (
        (spec.model_name or "").removeprefix("scripted:")
        if (spec.model_name or "").startswith("scripted:")
        else ""
    )
    step_seconds = float(os.environ.get("AKKA_SCRIPTED_STEP_SECONDS", "0.2"))
    reporter = HttpReporter(
        spec.trainer_url,
        spec.run_id,
        spec.attempt,
        token,
        heartbeat_seconds=1.0,
        report_seconds=spec.telemetry.report_seconds,
    )
    blobs = open_blob_store(spec.storage_url, spec.storage_s3, where="job")
    settings = spec.settings
    training = (
        settings.config.rl_hyperparams.training
        if settings.method in RL_METHODS and settings.config.rl_hyperparams
        else settings.config.hyperparams.training  # type: ignore[union-attr]
    )
    # As the engines count: a continuation trains maxSteps beyond its source's snapshot.
    base = settings.source.step if settings.source and settings.source.kind == "continue" else 0
    total = base + (training.max_steps or 6)
    start = base
    if spec.resume is not None:
        start = json.loads(blobs.get_bytes(f"{spec.resume.training_state}/state.json"))["step"]
    # As the job's entry point: SIGTERM is a save-and-stop unless the service says stop.
    signal.signal(signal.SIGTERM, lambda _signum, _frame: reporter.terminated())
    reporter.started(Placement(host=socket.gethostname(), pid=os.getpid()))
    reporter.training(
        TrainingReport(
            total_steps=total,
            data_fit={
                "rows": settings.dataset.rows,
                "rowsTruncated": 0,
                "answersTruncated": 0,
                "rowsDropped": 0,
            },
            adapter_modules=["model.layers.0.self_attn.q_proj"],
        )
    )
    save_every = settings.execution.save_every
    step = start
    while step < total:
        time.sleep(step_seconds)  # the job's work: a step takes this long (not a test's wait)
        step += 1
        if step == 2 and mode:
            _misbehave(mode, reporter)
        reporter.report_step(
            StepReport(
                step=step,
                total_steps=total,
                metrics={
                    "loss": round(1.0 / (step + 1), 6),
                    "learning_rate": 1e-4,
                    "memory/host_peak": 1e8 + step,
                    **(_preference_figures(step - start) if settings.method == "dpo" else {}),
                },
            )
        )
        reporter.flush(timeout=60)
        if reporter.action == "stop":
            reporter.stopped(StoppedReport(step=step))
            return 0
        if reporter.action == "save-and-stop":
            _snapshot(spec, blobs, reporter, step)
            reporter.flush(timeout=60)
            reporter.stopped(StoppedReport(step=step))
            return 0
        if step % save_every == 0 and step < total:
            _snapshot(spec, blobs, reporter, step)
    adapter = blobkeys.adapter_prefix(spec.run_id)
    blobs.put_bytes(
        f"{adapter}adapter_config.json",
        json.dumps({"scripted": True, "step": step, "r": 8, "lora_alpha": 16}).encode(),
    )
    blobs.put_bytes(f"{adapter}adapter_model.safetensors", EMPTY_SAFETENSORS)
    reporter.finished(
        FinishedReport(
            adapter=adapter, step=step, adapter_modules=["model.layers.0.self_attn.q_proj"]
        )
    )
    reporter.close()
    return 0


def _snapshot(spec: JobSpec, blobs: object, reporter: HttpReporter, step: int) -> None:
    keys = blobkeys.snapshot_keys(spec.run_id, step)
    blobs.put_bytes(f"{keys.weights}adapter_config.json", json.dumps({"step": step}).encode())  # type: ignore[attr-defined]
    blobs.put_bytes(f"{keys.weights}adapter_model.safetensors", EMPTY_SAFETENSORS)  # type: ignore[attr-defined]
    blobs.put_bytes(f"{keys.training_state}state.json", json.dumps({"step": step}).encode())  # type: ignore[attr-defined]
    reporter.snapshot(
        SnapshotReport(
            name=keys.name, step=step, weights=keys.weights, training_state=keys.training_state
        )
    )


def _misbehave(mode: str, reporter: HttpReporter) -> None:
    reporter.flush(timeout=30)
    if mode == "exit-without-report":
        os._exit(0)
    if mode == "crash":
        print(
            "Traceback (most recent call last):\nRuntimeError: scripted crash at step 2", flush=True
        )
        os._exit(3)
    if mode == "device-oom":
        print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", flush=True)
        os._exit(1)
    if mode == "host-oom":
        print(
            "RuntimeError: DefaultCPUAllocator: can't allocate memory: you tried to allocate 8589934592 bytes.",
            flush=True,
        )
        os._exit(1)
    if mode == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    if mode == "hang":
        while True:
            time.sleep(1)  # the job hangs (what a test of hung jobs needs): not a test's wait


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))


def _preference_figures(trained: int) -> dict[str, float]:
    """A dpo step's preference figures: 0 at the first step (the policy is the reference),
    then a margin that grows."""
    margin = round(0.05 * trained * (trained - 1) / 2 if trained else 0.0, 6)
    return {
        "rewards/chosen": margin / 2,
        "rewards/rejected": -margin / 2,
        "rewards/margins": margin,
        "rewards/accuracies": min(1.0, 0.25 * (trained - 1)) if trained > 1 else 0.0,
        "logps/chosen": -10.0 + margin,
        "logps/rejected": -10.0 - margin,
    }
