"""The Python client's guide page: its complete example runs as written against a real trainer
on the tiny development models, connected as the CLI would connect."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "python-client.md"


def example(heading: str = "## A complete example") -> str:
    section = PAGE.read_text().split(heading, 1)[1]
    found = re.search(r"```python\n(.*?)```", section, re.S)
    assert found, "the example's code block is missing"
    return found.group(1)


def test_the_example_is_the_one_the_page_describes() -> None:
    code = example()
    for call in ("connect()", "register_dataset(", "start_run(", "wait_run(", "rollouts("):
        assert call in code, call
    compile(code, str(PAGE), "exec")


def test_the_async_example_awaits_the_client() -> None:
    code = example("## From async code")
    for call in ("AsyncTrainerClient.wrapping(connect())", "await asyncio.gather(", "async for"):
        assert call in code, call
    compile(code, str(PAGE), "exec")


@pytest.mark.slow
def test_the_async_example_runs_against_a_real_trainer(trainer_factory: Any) -> None:
    trainer = trainer_factory({})
    env = {k: v for k, v in trainer.env.items() if k != "TRAINER_URL"}
    result = subprocess.run(
        [sys.executable, "-c", example("## From async code")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.match(r"engine \w+; projects: ", result.stdout), result.stdout


@pytest.mark.slow
def test_the_example_runs_against_a_real_trainer(trainer_factory: Any, dev_models: Path) -> None:
    trainer = trainer_factory(
        {"trainer": {"dev-models-dir": str(dev_models), "controller": {"interval-seconds": 0.2}}}
    )
    # The trainer's environment holds the CLI's configuration file (the `local` context and its
    # login) and nothing else: connect() finds the trainer from it, as the CLI does.
    env = {k: v for k, v in trainer.env.items() if k != "TRAINER_URL"}
    result = subprocess.run(
        [sys.executable, "-c", example()],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "dataset demo/arithmetic-prompts:v1: 50 rows, new: True" in out
    assert "would train on demo/arithmetic-prompts in pool" in out
    assert re.search(r"run \w+ completed at step 4, reward \d\.\d{3}", out), out
    assert "step 4: the 3 worst of 8 rollouts" in out
    assert len(re.findall(r"^  \d\.\d\d  '", out, re.M)) == 3, out
