"""Helpers for integration tests: plans, datasets and waiting, through the real CLI."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from akka_training.api.runs import RunRecord
from akka_training.testing.service import TrainerProcess
from akka_training.testing.waiting import until

# A catalog for tests whose jobs train nothing (the scripted job): no model files needed.
SCRIPTED_CATALOG = [
    {
        "id": "tiny-chat",
        "path": "/nonexistent/tiny-chat",
        "context-length": 2048,
        "envelopes": [
            {"method": m, "engine": "trl", "gpus": 1, "precision": "FP32", "host-memory-gib": 1}
            for m in ("sft", "grpo", "gspo")
        ],
    }
]


def scripted_settings(**trainer: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "catalog": SCRIPTED_CATALOG,
        "testing": {"scripted-jobs": True},
        # Reports every 0.5 s: a pause asked for after a scripted run's third step lands well
        # before its last (steps of 0.2-0.3 s, runs of ten).
        "controller": {"interval-seconds": 0.2, "retry-base-seconds": 0.2, "report-seconds": 0.5},
        "local": {"stop-grace-seconds": 5},
        "pools": [{"name": "default", "accelerator": "cpu", "devices": 1}],
    }
    for key, value in trainer.items():
        name = key.replace("_", "-")
        if isinstance(value, dict) and isinstance(base.get(name), dict):
            value = {**base[name], **value}  # a test's controller keys on top of these
        base[name] = value
    return {"trainer": base}


CHAT_ROWS = [
    {
        "messages": [
            {"role": "user", "content": f"What is {a} + {b}?"},
            {"role": "assistant", "content": f"#### {a + b}"},
        ]
    }
    for a in range(1, 9)
    for b in range(1, 6)
]


def register_dataset(
    trainer: TrainerProcess, ref: str, rows: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    path = trainer.home / f"{ref.replace('/', '_')}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in (rows or CHAT_ROWS)))
    registered: dict[str, Any] = trainer.cli_json(
        "training", "datasets", "register", ref, "-f", str(path)
    )
    return registered


def ensure_project(trainer: TrainerProcess, name: str, quota: int | None = None) -> None:
    args = ["training", "projects", "create", name]
    if quota is not None:
        args += ["--quota", str(quota)]
    trainer.cli(*args)


def sft_plan(project: str, dataset: str, steps: int = 6, **extra: Any) -> dict[str, Any]:
    plan: dict[str, Any] = {
        "kind": "run",
        "project": project,
        "baseModel": "tiny-chat",
        "config": {
            "dataset": dataset,
            "method": "sft",
            "maxSeqLength": 256,
            "hyperparams": {"training": {"maxSteps": steps, "batchSize": 2}},
        },
        "execution": {"gpus": 1, "saveEvery": 2},
    }
    for key, value in extra.items():
        plan[key] = value
    return plan


def write_plan(trainer: TrainerProcess, plan: dict[str, Any], name: str = "plan.yaml") -> Path:
    path = trainer.home / name
    path.write_text(yaml.safe_dump(plan))
    return path


def start_run(trainer: TrainerProcess, plan: dict[str, Any]) -> str:
    path = write_plan(trainer, plan, f"plan-{time.monotonic_ns()}.yaml")
    return str(trainer.cli_json("training", "runs", "start", "-f", str(path))["id"])


def run_get(trainer: TrainerProcess, run_id: str) -> dict[str, Any]:
    return dict(trainer.cli_json("training", "runs", "get", run_id))


def wait_for(
    trainer: TrainerProcess,
    run_id: str,
    predicate: Callable[[RunRecord], bool],
    timeout: float = 120.0,
) -> RunRecord:
    """Poll the run (through the client, not the CLI, to keep polling cheap) until `predicate`."""
    with trainer.client() as client:
        seen: list[RunRecord] = []

        def arrived() -> RunRecord | None:
            run = client.run(run_id)
            seen[:] = [run]
            return run if predicate(run) else None

        found = until(
            arrived,
            what=f"run {run_id} to get there",
            timeout=timeout,
            interval=0.2,
            detail=lambda: f"{seen[0].phase} {seen[0].progress}\n{trainer.log()[-3000:]}",
        )
        assert found is not None  # until returns only a truthy answer
        return found


def wait_phase(
    trainer: TrainerProcess, run_id: str, *phases: str, timeout: float = 120.0
) -> RunRecord:
    return wait_for(trainer, run_id, lambda r: r.phase in phases, timeout)


def steps_of(trainer: TrainerProcess, run_id: str) -> list[int]:
    with trainer.client() as client:
        return [s.step for s in client.metrics(run_id).steps]
