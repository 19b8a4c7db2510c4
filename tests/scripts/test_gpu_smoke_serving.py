"""scripts/gpu-smoke-serving.sh: its dry run says what it would run on a GPU machine, and
installs, starts and measures nothing."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu-smoke-serving.sh"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=60, check=False
    )


def test_the_dry_run_says_what_each_phase_would_run(tmp_path: Path) -> None:
    out = _run("--dry-run", str(tmp_path))

    assert out.returncode == 0, out.stdout + out.stderr
    would = [line for line in out.stdout.splitlines() if line.startswith("WOULD ")]
    assert len(would) == 2
    assert "scripts/setup-vllm-env.sh --gpu --system-site-packages" in would[0]
    assert "bench/serving.py --gpu --adapters --vllm " in would[1]
    assert "--smoke --streams 32 --repeats 3" in would[1]
    assert "GPU SERVING SMOKE SUMMARY" in out.stdout
    assert "dry run" in out.stdout
    assert list(tmp_path.iterdir()) == []  # nothing installed, started or measured


def test_an_unknown_option_is_refused_with_where_to_look() -> None:
    out = _run("--fast")

    assert out.returncode == 2
    assert out.stderr.strip() == "unknown option: --fast (see --help)"


def test_help_is_the_scripts_own_description() -> None:
    out = _run("--help")

    assert out.returncode == 0
    assert out.stdout.startswith("# Serving on a GPU machine, prepared as one script")
    assert "--dry-run prints what each phase would run" in out.stdout
