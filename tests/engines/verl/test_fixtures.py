"""The committed fixtures are what verl's own code produces today: `fixtures/make_fixtures.py`
runs again, in verl's environment, and must write the same files (timings aside)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.engines.verl.conftest import FIXTURES, VerlEnv

# Runs verl's own environment (.venv-verl).
pytestmark = pytest.mark.slow

TIMINGS = ("started", "seconds", "term_seconds")


def test_fixtures_reproduce(verl_env: VerlEnv, tmp_path: Path) -> None:
    done = verl_env.run([str(FIXTURES / "make_fixtures.py"), str(tmp_path)], cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    # compared as data: verl builds some of its metric dicts from sets, so key order varies
    assert lines(tmp_path / "metrics.jsonl") == lines(FIXTURES / "metrics.jsonl")
    for step in (1, 2, 3):
        name = f"rollouts/{step}.jsonl"
        assert (tmp_path / name).read_text() == (FIXTURES / name).read_text()
    made, committed = (
        [
            {k: v for k, v in json.loads(line).items() if k not in TIMINGS}
            for line in path.read_text().splitlines()
        ]
        for path in (
            tmp_path / "records" / "worker-0.jsonl",
            FIXTURES / "records" / "worker-0.jsonl",
        )
    )
    assert made == committed
    assert (tmp_path / "tokenizer" / "tokenizer.json").read_text() == (
        FIXTURES / "tokenizer" / "tokenizer.json"
    ).read_text()


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]
