"""The demo's set-up installs nothing it does not need: promtool, which only the tests use, is
installed by the test command's own step, and the demo prints every command it runs."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.scripts.test_demo_summary import demo

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scripts"


def test_the_demo_set_up_installs_no_system_packages() -> None:
    assert "./scripts/setup\n" in (SCRIPTS / "demo").read_text()
    setup = (SCRIPTS / "setup").read_text()
    for word in ("apt-get", "sudo", "prometheus", "promtool"):
        assert word not in setup, word


def test_the_test_command_and_ci_still_install_promtool() -> None:
    assert "./scripts/setup-promtool\n" in (SCRIPTS / "test").read_text()
    assert "exec ./scripts/test" in (ROOT / ".ci" / "run").read_text()


@pytest.mark.slow
def test_setup_promtool_installs_prometheus_through_sudo_when_not_root(tmp_path: Path) -> None:
    log = tmp_path / "calls"
    for name, body in (
        ("sudo", f'echo "sudo $*" >> {log}; exec "$@"'),
        ("apt-get", f'echo "apt-get $*" >> {log}'),
    ):
        tool = tmp_path / name
        tool.write_text(f"#!/bin/sh\n{body}\n")
        tool.chmod(0o755)
    # A PATH with the script's own tools and the two stand-ins only, so no promtool is found.
    for name in ("bash", "id"):
        found = shutil.which(name)
        assert found is not None, name
        (tmp_path / name).symlink_to(found)
    env = {**os.environ, "PATH": str(tmp_path)}
    done = subprocess.run(
        [str(SCRIPTS / "setup-promtool")], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    install = "apt-get install -y -q prometheus"
    sudo = [] if os.getuid() == 0 else [f"sudo {install}"]
    assert log.read_text().splitlines() == [*sudo, install]
    shown = f"{'sudo ' if sudo else ''}{install}    # promtool, for the tests"
    assert shown in done.stderr


def test_the_demo_prints_the_commands_whose_answers_it_reads(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    module = demo()

    def run(argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(argv, 0, stdout='{"id": "ev-1"}', stderr="")

    monkeypatch.setattr(module.subprocess, "run", run)
    answer = module.akka_json({}, "training", "evaluations", "start", "-f", "plan yaml")
    assert answer == {"id": "ev-1"}
    assert capsys.readouterr().out == (
        "\n$ akka training evaluations start -f 'plan yaml' -o json\n"
    )
