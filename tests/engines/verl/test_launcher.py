"""verl's process lifecycle, with a stand-in for verl (``fixtures/fake_verl.py``) that writes
verl's files from the fixtures: start, new steps seen, stall detected, stop, exit status."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import psutil
import pytest

from akka_training.engines.verl.launcher import (
    FAMILY_ENV,
    Exited,
    Stalled,
    Steps,
    Tick,
    VerlProcess,
    reap_leftovers,
)
from akka_training.engines.verl.overrides import build_overrides
from akka_training.engines.verl.paths import VerlPaths
from akka_training.engines.verl.reward_config import RewardConfig
from tests.engines.verl.conftest import FIXTURES, make_spec

# Every test here runs verl's process (a stand-in for it) and waits on it: to exit, to stall, to stop.
pytestmark = pytest.mark.slow

FAKE = FIXTURES / "fake_verl.py"


def fake_verl(
    tmp_path: Path, mode: str = "", steps: int = 3, family: str | None = None, **env: str
) -> tuple[VerlProcess, VerlPaths]:
    paths = VerlPaths(tmp_path / "run", 1)
    paths.make_dirs()
    RewardConfig([], 1, {}, str(FIXTURES / "tokenizer"), 16, str(paths.reward_records)).write(
        paths.reward_config
    )
    spec = make_spec(rl={"training": {"maxSteps": steps}})
    command = [
        sys.executable,
        str(FAKE),
        "-m",
        "verl.trainer.main_ppo",
        *build_overrides(spec, paths),
    ]
    full_env = {"VERL_FILE_LOGGER_PATH": str(paths.metrics_file), "FAKE_VERL_MODE": mode, **env}
    process = VerlProcess(
        command,
        metrics_file=paths.metrics_file,
        log_file=paths.log_file,
        env=full_env,
        family=family,
    )
    return process, paths


def test_steps_are_followed_until_verl_exits(tmp_path: Path) -> None:
    process, paths = fake_verl(tmp_path, steps=4)
    process.start()
    events = list(process.events(poll_seconds=0.05))
    steps = [s.step for e in events if isinstance(e, Steps) for s in e.steps]
    assert steps == [1, 2, 3, 4]
    assert events[-1] == Exited(0)
    assert not any(isinstance(e, Stalled) for e in events)
    assert "fake verl: training" in paths.log_file.read_text()
    assert process.stop() == 0  # stopping an ended run only collects it


def test_a_stall_is_reported_once(tmp_path: Path) -> None:
    process, _ = fake_verl(tmp_path, mode="stall:2", steps=5)
    process.start()
    seen: list[int] = []
    stalls = []
    after = 0  # events followed after the stall
    for event in process.events(poll_seconds=0.05, stall_seconds=0.6, startup_seconds=30):
        if isinstance(event, Steps):
            seen += [s.step for s in event.steps]
        elif isinstance(event, Stalled):
            stalls.append(event)
        elif stalls:
            after += 1
        if after == 10:  # ten more looks (half a second): the stall is not reported again
            break
    assert seen == [1, 2]
    assert len(stalls) == 1 and stalls[0].last_step == 2 and stalls[0].seconds >= 0.6
    assert process.stop(grace=5) == -15  # SIGTERM ended it


def test_stop_ends_the_group_and_processes_in_other_sessions(tmp_path: Path) -> None:
    child_file = tmp_path / "child.pid"
    process, _ = fake_verl(tmp_path, mode="stall:1", steps=5, FAKE_VERL_CHILD=str(child_file))
    process.start()
    for event in process.events(poll_seconds=0.05):
        if isinstance(event, Steps):
            break
    child = psutil.Process(int(child_file.read_text()))
    assert child.is_running() and os.getsid(child.pid) != os.getsid(process.pid)
    assert process.stop(grace=5) == -15
    child.wait(timeout=5)  # raises if the child outlived the stop
    assert (
        not psutil.pid_exists(process.pid)
        or psutil.Process(process.pid).status() == psutil.STATUS_ZOMBIE
    )


def test_sigkill_after_the_grace_period(tmp_path: Path) -> None:
    process, _ = fake_verl(tmp_path, mode="ignore-term", steps=1)
    process.start()
    for event in process.events(poll_seconds=0.05):
        if isinstance(event, Steps):
            break
    assert process.stop(grace=0.5) == -9  # it ignored SIGTERM: killed once the grace ran out


@pytest.mark.parametrize(
    ("mode", "code", "text"),
    [
        ("crash:1", 1, "RuntimeError: the policy update diverged"),
        ("oom:2", 1, "CUDA out of memory"),
    ],
)
def test_a_failing_verl_exits_with_its_status(
    tmp_path: Path, mode: str, code: int, text: str
) -> None:
    process, paths = fake_verl(tmp_path, mode=mode, steps=5)
    process.start()
    events = list(process.events(poll_seconds=0.05))
    assert events[-1] == Exited(code)
    assert text in paths.log_file.read_text()


def test_ticks_while_verl_starts(tmp_path: Path) -> None:
    process, _ = fake_verl(tmp_path, steps=1, FAKE_VERL_STEP_SECONDS="0.6")
    process.start()
    first = next(process.events(poll_seconds=0.05))
    assert first == Tick()
    process.stop(grace=5)


def test_metrics_file_is_fresh_per_attempt(tmp_path: Path) -> None:
    process, paths = fake_verl(tmp_path, steps=2)
    process.start()
    list(process.events(poll_seconds=0.05))
    lines = [json.loads(line)["step"] for line in paths.metrics_file.read_text().splitlines()]
    assert lines == [1, 2]
    assert VerlPaths(paths.root, 2).metrics_file != paths.metrics_file


def test_a_normal_exit_reaps_what_outlived_verl(tmp_path: Path) -> None:
    child_file = tmp_path / "child.pid"
    process, _ = fake_verl(tmp_path, steps=2, FAKE_VERL_CHILD=str(child_file))
    process.start()
    assert list(process.events(poll_seconds=0.05))[-1] == Exited(0)
    child = psutil.Process(int(child_file.read_text()))
    assert (child.is_running() and child.ppid() == 1) or child.ppid() != process.pid
    assert process.stop(grace=5) == 0
    child.wait(timeout=5)  # raises if the child outlived the stop


def test_what_an_earlier_attempt_left_is_ended_by_the_runs_marker(tmp_path: Path) -> None:
    """A job killed outright (SIGKILL: no chance to stop verl) leaves verl's processes in other
    sessions running; the next attempt of the run finds them by the marker in their
    environment and ends them."""
    child_file = tmp_path / "child.pid"
    process, _ = fake_verl(
        tmp_path, mode="stall:1", steps=5, family="run-7/1", FAKE_VERL_CHILD=str(child_file)
    )
    process.start()
    for event in process.events(poll_seconds=0.05):
        if isinstance(event, Steps):
            break
    child = psutil.Process(int(child_file.read_text()))
    assert child.environ()[FAMILY_ENV].startswith("run-7/1/")
    os.kill(process.pid, 9)
    process.wait(timeout=5)
    assert child.is_running()
    assert reap_leftovers("run-70") == 0  # another run's prefix does not match
    assert reap_leftovers("run-7", grace=5) == 1
    child.wait(timeout=5)
