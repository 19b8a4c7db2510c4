"""The job's modules that the service, the CLI's tests and the fast layer import load no
training stack: torch and the libraries over it load where a job or a test uses them."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("torch", "transformers", "trl", "peft", "datasets")
LIGHT = (
    "akka_training.engines.job",
    "akka_training.engines.failures",
    "akka_training.engines.watchdog",
    "akka_training.engines.memory",
    "akka_training.engines.datafit",
    "akka_training.engines.tasks.preview",
    "akka_training.engines.verl.engine",
    "akka_training.engines.verl.smoke",
    "akka_training.engines.trl.generation",
    "akka_training.engines.trl.sft_speed",
    "akka_training.devmodels.catalog",
)


def test_the_job_modules_import_no_training_stack() -> None:
    code = (
        "import importlib, json, sys\n"
        f"for name in {LIGHT!r}:\n"
        "    importlib.import_module(name)\n"
        f"print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)

    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
