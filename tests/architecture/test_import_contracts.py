"""The import directions of ARCHITECTURE.md hold, and breaking one fails the check."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _lint_imports(src: Path, cache: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--config", str(REPO / "pyproject.toml"), "--cache-dir", str(cache)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def test_the_tree_keeps_every_contract(tmp_path: Path) -> None:
    result = _lint_imports(REPO / "src", tmp_path / "cache")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_a_controller_import_of_the_server_breaks_the_layers(tmp_path: Path) -> None:
    src = tmp_path / "src"
    shutil.copytree(REPO / "src" / "akka_training", src / "akka_training")
    loop = src / "akka_training" / "controller" / "loop.py"
    loop.write_text(loop.read_text() + "\nimport akka_training.server.app  # a new upward import\n")
    result = _lint_imports(src, tmp_path / "cache")
    assert result.returncode != 0
    assert "akka_training.controller is not allowed to import akka_training.server" in result.stdout
    assert "akka_training.controller.loop -> akka_training.server.app" in result.stdout


def test_a_cli_import_of_torch_breaks_the_light_start(tmp_path: Path) -> None:
    src = tmp_path / "src"
    shutil.copytree(REPO / "src" / "akka_training", src / "akka_training")
    runs = src / "akka_training" / "cli" / "training" / "runs.py"
    runs.write_text(runs.read_text() + "\nimport torch  # a heavy import in the CLI\n")
    result = _lint_imports(src, tmp_path / "cache")
    assert result.returncode != 0
    assert "akka_training.cli.training.runs -> torch" in result.stdout
