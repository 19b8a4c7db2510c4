"""The README's quickstart runs as written: its whole block, `akka trainer serve` in the
background included, pasted into one shell with `set -e` on a fresh home, starts a trainer, waits
for it while it starts, trains a real SFT run on the development model and downloads its
adapter."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from akka_training.testing.service import free_port

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
    assert lines[0].startswith("akka trainer serve >trainer.log 2>&1 &")
    assert all(line.startswith(("akka ", "RUN=")) for line in lines)


def test_the_readme_quickstart_runs_as_written(dev_models: Path, tmp_path: Path) -> None:
    # The block as a reader pastes it, the trainer's start included: a fresh home and CLI
    # configuration, a free port instead of 9001; the development models come prebuilt so that
    # the test does not build them again (the trainer still takes seconds to start, while the
    # next line already asks it).
    work = tmp_path / "checkout"
    work.mkdir()
    (work / "examples").symlink_to(ROOT / "examples")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AKKA_", "TRAINER_"))}
    env |= {
        "AKKA_HOME": str(tmp_path / "home"),
        "AKKA_CONFIG": str(tmp_path / "config.yaml"),
        "AKKA_TRAINER__LISTEN__PORT": str(port),
        "AKKA_TRAINER__DEV_MODELS_DIR": str(dev_models),
        "TRAINER_URL": f"http://127.0.0.1:{port}",
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    # The trainer the block starts in the background stops with the shell, however it ends.
    script = "trap 'kill $(jobs -p) 2>/dev/null; wait' EXIT\nset -euo pipefail\n"
    script += "\n".join(quickstart()) + "\n"
    shell = subprocess.Popen(
        ["bash", "-c", script],
        cwd=work,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = shell.communicate(timeout=900)
    finally:
        if shell.poll() is None:
            os.killpg(shell.pid, signal.SIGKILL)
            shell.wait()
    assert shell.returncode == 0, f"stdout:\n{stdout}\nstderr:\n{stderr}"
    assert stdout.startswith("Version"), stdout  # the trainer's own log went to trainer.log
    assert "akka trainer http://127.0.0.1:" in (work / "trainer.log").read_text()
    assert "Resolved settings:" in stdout
    assert re.search(r"^Run \w+ COMPLETED$", stdout, flags=re.M), stdout
    downloaded = work / "arithmetic-sft"
    assert (downloaded / "adapter_config.json").is_file()
    assert (downloaded / "adapter_model.safetensors").is_file()
