"""Every command block of the README and the guide runs as written against a real trainer, or
says in `blocks.py` why it does not (the one list of blocks that cannot run here)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from akka_training.testing.service import TrainerProcess
from tests.docs.blocks import ROOT, Block, as_script, command_blocks, listed

BLOCKS = command_blocks()
RUNNABLE = [b for b in BLOCKS if listed(b) == "RUN"]


def test_every_command_block_is_run_or_says_why() -> None:
    unlisted = [f"{b.page}: {b.first_line}" for b in BLOCKS if listed(b) is None]
    assert not unlisted, (
        "add these blocks to RUN or NOT_RUN in tests/docs/blocks.py:\n" + "\n".join(unlisted)
    )
    assert len(RUNNABLE) >= 10


@pytest.fixture(scope="module")
def reader(dev_models: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A trainer holding what the pages assume (see `PLACEHOLDERS`), and the shell environment
    that reaches it."""
    home = tmp_path_factory.mktemp("trainer")
    trainer = TrainerProcess(home, {"trainer": {"dev-models-dir": str(dev_models)}}).start()
    try:
        yield _prepare(trainer, tmp_path_factory.mktemp("reader"))
    finally:
        trainer.close()


def _prepare(trainer: TrainerProcess, work: Path) -> dict[str, str]:
    trainer.cli("training", "projects", "create", "maths", "--quota", "2")
    data = ROOT / "examples" / "data" / "arithmetic.jsonl"
    trainer.cli(
        "training", "datasets", "register", "maths/train", "-f", str(data), "--alias", "prod"
    )
    plan = work / "sft.yaml"
    text = (ROOT / "examples" / "sft.yaml").read_text()
    text = text.replace("project: demo", "project: maths").replace("demo/arithmetic-eval", "")
    plan.write_text(text.replace("dataset: demo/arithmetic", "dataset: maths/train"))
    run = trainer.cli_json("training", "runs", "start", "-f", str(plan))["id"]
    trainer.cli("training", "runs", "wait", run, "--exit-status", timeout=600)
    env = dict(trainer.env)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["RUN"] = run
    return env


@pytest.mark.slow
@pytest.mark.parametrize("block", RUNNABLE, ids=[f"{b.page}:{b.first_line[:40]}" for b in RUNNABLE])
def test_a_command_block_runs_as_written(block: Block, reader: Any, tmp_path: Path) -> None:
    env = reader
    script, transcripts = as_script(block)
    if script:
        done = subprocess.run(
            ["bash", "-c", "set -euo pipefail\n" + script],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert done.returncode == 0, f"{script}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    for command, output in transcripts:
        done = subprocess.run(
            ["bash", "-c", command],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        printed = done.stdout + done.stderr
        assert "Traceback" not in printed
        for line in output:
            assert line in printed, f"`{command}` did not print {line!r}:\n{printed}"
