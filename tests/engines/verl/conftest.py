"""Shared helpers for the verl engine tests: resolved plans and verl's own environment.

Tests that run verl's code use the environment `scripts/setup-verl-env.sh` builds (default
``.venv-verl`` in the repository root, or ``AKKA_VERL_PYTHON``); they are skipped, saying so,
when it is absent.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import akka_training
from akka_training.core.resolved import JobSpec

REPO = Path(__file__).resolve().parents[3]
FIXTURES = Path(__file__).with_name("fixtures")


def verl_python() -> Path | None:
    """The interpreter of verl's environment, or None when it was not built."""
    configured = os.environ.get("AKKA_VERL_PYTHON")
    candidate = Path(configured) if configured else REPO / ".venv-verl" / "bin" / "python"
    return candidate if candidate.exists() else None


@dataclass(frozen=True)
class VerlEnv:
    """verl's interpreter, with our package (the one these tests import) on its path, as the
    engine arranges it (`engine._link_package`)."""

    python: Path
    pylib: Path

    def run(
        self, args: list[str], *, timeout: float = 180, env: dict[str, str] | None = None, **kw: Any
    ) -> subprocess.CompletedProcess[str]:
        full_env = {**os.environ, "PYTHONPATH": str(self.pylib), "HYDRA_FULL_ERROR": "1"}
        full_env.update(env or {})
        return subprocess.run(
            [str(self.python), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=full_env,
            **kw,
        )


@pytest.fixture(scope="session")
def verl_env(tmp_path_factory: pytest.TempPathFactory) -> VerlEnv:
    python = verl_python()
    if python is None and os.environ.get("AKKA_REQUIRE_VERL_ENV"):
        pytest.fail(
            "AKKA_REQUIRE_VERL_ENV is set but verl's environment is not built (scripts/setup-verl-env.sh)"
        )
    if python is None:
        pytest.skip(
            "verl's environment is not built: run scripts/setup-verl-env.sh (or set "
            "AKKA_VERL_PYTHON) to run the tests that call verl itself"
        )
    pylib = tmp_path_factory.mktemp("pylib")
    (pylib / "akka_training").symlink_to(Path(akka_training.__file__).parent)
    return VerlEnv(python, pylib)


def make_spec(
    *,
    method: str = "grpo",
    gpus: int = 1,
    rl: dict[str, Any] | None = None,
    source: dict[str, Any] | None = None,
    resume: bool = False,
    eval_dataset: bool = False,
    rows: int = 64,
    modality: str = "text",
    max_seq_length: int | None = 1024,
    terms: list[dict[str, Any]] | None = None,
    model_path: str = "/models/tiny-chat",
    save_every: int = 2,
    monitors: dict[str, Any] | None = None,
) -> JobSpec:
    """A resolved grpo/gspo plan as the service hands it to a verl job."""
    dataset = {
        "ref": "maths/train",
        "name": "maths/train",
        "version": 1,
        "sha256": "a" * 64,
        "rows": rows,
        "bytes": 1000,
        "format": "chat",
        "has_images": False,
        "blob": "datasets/sha256/aa/train",
    }
    rl_hyperparams: dict[str, Any] = {
        "promptsPerStep": 8,
        "generationsPerPrompt": 4,
        "maxCompletionTokens": 128,
    }
    rl_hyperparams.update(rl or {})
    settings: dict[str, Any] = {
        "project": "maths",
        "method": method,
        "engine": "verl",
        "baseModel": {
            "id": "tiny-chat",
            "path": model_path,
            "revision": None,
            "modality": modality,
            "contextLength": 2048,
        },
        "dataset": dataset,
        "config": {
            "dataset": "maths/train",
            "method": method,
            "maxSeqLength": max_seq_length,
            "rlHyperparams": rl_hyperparams,
            "reward": {
                "terms": terms
                or [
                    {"name": "correct", "kind": "match", "weight": 1.0, "mode": "final-number"},
                    {"name": "format", "kind": "regex", "weight": 0.2, "pattern": "#### -?[0-9]+$"},
                ]
            },
        },
        "execution": {"gpus": gpus, "saveEvery": save_every},
    }
    if monitors is not None:
        settings["config"]["monitors"] = monitors
    if eval_dataset:
        settings["evalDataset"] = {
            **dataset,
            "ref": "maths/eval",
            "name": "maths/eval",
            "blob": "datasets/sha256/bb/eval",
            "rows": 16,
        }
        settings["config"]["evalDataset"] = "maths/eval"
    if source is not None:
        settings["source"] = source
    body: dict[str, Any] = {
        "runId": "run-1",
        "attempt": 2 if resume else 1,
        "project": "maths",
        "trainerUrl": "http://127.0.0.1:9",
        "storageUrl": "file:///tmp/blobs",
        "settings": settings,
    }
    if resume:
        body["resume"] = {
            "snapshot": "step-2",
            "step": 2,
            "weights": "runs/run-1/snapshots/step-2/weights/",
            "trainingState": "runs/run-1/snapshots/step-2/training-state/",
        }
    return JobSpec.model_validate(body)
