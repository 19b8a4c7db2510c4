"""The GPU smoke check's own flow, on a CPU: its three acts (train and pause with a save, resume
and cancel, check) through the real engine against the stand-in for verl, as
``scripts/gpu-smoke-verl.sh --dry-run`` runs them."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from akka_training.engines.verl import smoke
from tests.engines.verl.conftest import FIXTURES

# Runs verl's process (a stand-in for it) three times.
pytestmark = pytest.mark.slow


def test_the_smoke_check_pauses_resumes_cancels_and_sums_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nexec {sys.executable} {FIXTURES / "fake_verl.py"} "$@"\n')
    python.chmod(0o755)
    monkeypatch.setenv("FAKE_VERL_STEP_SECONDS", "1")
    code = smoke.main(
        [
            "--verl-python", str(python), "--model", str(FIXTURES / "tokenizer"),
            "--workdir", str(tmp_path / "smoke"), "--dry-run",
        ]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0, out
    lines = out.splitlines()
    checks = [line for line in lines if line.startswith(("PASS", "FAIL"))]
    assert all(line.startswith("PASS") for line in checks), out
    assert any("pause --checkpoint save: stopped at step" in line for line in checks)
    assert any("then cancel: stopped at step" in line for line in checks)
    assert "PASS the resume reused the checkpoint on the node" in checks
    assert "PASS no process of verl left behind" in checks
    summary = lines[lines.index("SUMMARY") :]
    assert any("perf/max_memory_allocated_gb" in line for line in summary)
    assert any(line.split()[:1] == ["MFU"] for line in summary)
    assert any(line.split()[:1] == ["tokens/s"] for line in summary)
    assert any(
        line.strip().startswith("snapshot ") and "training state" in line for line in summary
    )
    assert "  adapter     loads in PEFT" in summary


def test_the_smoke_check_says_what_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nexec {sys.executable} {FIXTURES / "fake_verl.py"} "$@"\n')
    python.chmod(0o755)
    monkeypatch.setenv("FAKE_VERL_MODE", "crash:1")
    code = smoke.main(
        [
            "--verl-python", str(python), "--model", str(FIXTURES / "tokenizer"),
            "--workdir", str(tmp_path / "smoke"), "--dry-run",
        ]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert code == 1
    assert "FAIL pause --checkpoint save: failed at step -" in out
    assert "training-error" in out and "the policy update diverged" in out
    assert "FAIL resume: not attempted (the pause did not stop with a snapshot)" in out
    assert "  adapter     DID NOT LOAD in PEFT" in out


def test_the_prepared_script_runs_its_phases_on_a_dry_run(tmp_path: Path) -> None:
    """scripts/gpu-smoke-verl.sh as written, with --dry-run: environments found, model chosen,
    the three acts, and the summary at the end."""
    import os
    import subprocess

    repo = FIXTURES.parents[3]
    done = subprocess.run(
        [str(repo / "scripts" / "gpu-smoke-verl.sh"), "--dry-run", str(tmp_path / "work")],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "AKKA_SMOKE_SECONDS": "300"},
        cwd=repo,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    summary = done.stdout[done.stdout.index("SMOKE SUMMARY") :].splitlines()
    assert summary[0].endswith("of 300 s, dry run)")
    assert "  PASS verl: the tests' stand-in (dry run)" in summary
    assert not [line for line in summary if line.startswith("  FAIL")]
    assert any("then cancel: stopped at step" in line for line in summary)
    assert any(line.split()[:1] == ["MFU"] for line in summary)
    assert summary[-1].startswith(f"  logs: {tmp_path / 'work'}")
