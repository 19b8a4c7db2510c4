"""What both job entry points say, and the status they exit with, when started without their
spec file or their token."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from akka_training.engines import job
from akka_training.engines.entry import USAGE, read_entry
from akka_training.engines.tasks import job as task_job

ENTRY_POINTS = [
    pytest.param(job.main, "akka_training.engines.job JOB_JSON", "AKKA_JOB_TOKEN", "job", id="job"),
    pytest.param(
        task_job.main,
        "akka_training.engines.tasks.job TASK_JSON",
        "AKKA_TASK_TOKEN",
        "task",
        id="task",
    ),
]


@pytest.mark.parametrize(("main", "usage", "token_env", "what"), ENTRY_POINTS)
def test_a_job_without_its_spec_file_says_how_it_is_started(
    main: Callable[[list[str]], int],
    usage: str,
    token_env: str,
    what: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main([]) == USAGE == 2
    assert capsys.readouterr().err == f"usage: python -m {usage}\n"


@pytest.mark.parametrize(("main", "usage", "token_env", "what"), ENTRY_POINTS)
def test_a_job_without_its_token_says_it_cannot_report(
    main: Callable[[list[str]], int],
    usage: str,
    token_env: str,
    what: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv(token_env, "  ")
    assert main([str(tmp_path / "spec.json")]) == USAGE
    assert capsys.readouterr().err == (
        f"{token_env} is not set: the {what} cannot report to the service\n"
    )


def test_the_entry_is_the_spec_files_text_and_the_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = tmp_path / "job.json"
    spec.write_text('{"run_id": "r1"}')
    monkeypatch.setenv("AKKA_JOB_TOKEN", " secret\n")
    entry = read_entry([str(spec)], "akka_training.engines.job", "JOB_JSON", "AKKA_JOB_TOKEN", "x")
    assert entry is not None
    assert (entry.spec_json, entry.token) == ('{"run_id": "r1"}', "secret")
