"""The README's quickstart runs as written against a real trainer: every command of its block
after `akka trainer serve`, in one shell with `set -e`, trains a real SFT run on the development
model and downloads its adapter."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def quickstart() -> list[str]:
    """The command lines of the README's "Run a trainer" block."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Run a trainer") :]
    block = re.search(r"```\n(.*?)```", section, flags=re.S)
    assert block is not None, "the README's Run a trainer section has no command block"
    return [line for line in block.group(1).splitlines() if line.strip()]


def test_the_quickstart_block_starts_the_service_first() -> None:
    lines = quickstart()
    assert lines[0].startswith("akka trainer serve &")
    assert all(line.startswith(("akka ", "RUN=")) for line in lines)


def test_the_readme_quickstart_runs_as_written(
    trainer_factory: Any, dev_models: Path, tmp_path: Path
) -> None:
    # `akka trainer serve` (the first line) on a free port with its own home; the development
    # models come prebuilt so that the test does not build them again.
    trainer = trainer_factory({"trainer": {"dev-models-dir": str(dev_models)}})
    work = tmp_path / "checkout"
    work.mkdir()
    (work / "examples").symlink_to(ROOT / "examples")
    script = "set -euo pipefail\n" + "\n".join(quickstart()[1:]) + "\n"
    env = dict(trainer.env)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    result = subprocess.run(
        ["bash", "-c", script],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert result.returncode == 0, f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    assert "The plan is valid" not in result.stdout  # --show-resolved prints the settings
    assert "Resolved settings:" in result.stdout
    assert re.search(r"^Run \w+ COMPLETED$", result.stdout, flags=re.M), result.stdout
    downloaded = work / "arithmetic-sft"
    assert (downloaded / "adapter_config.json").is_file()
    assert (downloaded / "adapter_model.safetensors").is_file()
