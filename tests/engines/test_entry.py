"""What both job entry points say, and the status they exit with, when started without their
spec file or their bootstrap credential, and how they exchange that credential for their
token."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from akka_training.engines import job
from akka_training.engines.entry import USAGE, Entry, exchange, read_entry
from akka_training.engines.tasks import job as task_job
from tests.engines.conftest import ReportServer

ENTRY_POINTS = [
    pytest.param(
        job.main, "akka_training.engines.job JOB_JSON", "AKKA_JOB_BOOTSTRAP", "job", id="job"
    ),
    pytest.param(
        task_job.main,
        "akka_training.engines.tasks.job TASK_JSON",
        "AKKA_TASK_BOOTSTRAP",
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
def test_a_job_without_its_bootstrap_credential_says_it_cannot_report(
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


def test_the_entry_is_the_spec_files_text_and_the_bootstrap_credential(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = tmp_path / "job.json"
    spec.write_text('{"run_id": "r1"}')
    monkeypatch.setenv("AKKA_JOB_BOOTSTRAP", " secret\n")
    entry = read_entry(
        [str(spec)], "akka_training.engines.job", "JOB_JSON", "AKKA_JOB_BOOTSTRAP", "x"
    )
    assert entry is not None
    assert (entry.spec_json, entry.bootstrap) == ('{"run_id": "r1"}', "secret")


def _entry(tmp_path: Path, bootstrap: str) -> Entry:
    spec = tmp_path / "job.json"
    spec.write_text("{}")
    return Entry(spec_json="{}", bootstrap=bootstrap, bootstrap_env="AKKA_JOB_BOOTSTRAP")


def test_the_exchange_gives_the_token_and_puts_the_store_credentials_in_the_environment(
    tmp_path: Path, report_server: ReportServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    report_server.store_env = {"AWS_SECRET_ACCESS_KEY": "store-secret"}
    monkeypatch.setenv("AKKA_JOB_BOOTSTRAP", "boot-1")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY", raising=False)

    token = exchange(_entry(tmp_path, "boot-1"), report_server.url, "the job")

    assert token == "exchanged:boot-1"
    assert os.environ["AWS_SECRET_ACCESS_KEY"] == "store-secret"  # the job's children inherit it
    assert "AKKA_JOB_BOOTSTRAP" not in os.environ  # spent: not handed on
    assert report_server.bootstraps == ["boot-1"]


def test_a_refused_exchange_says_so_and_exits_as_unusable(
    tmp_path: Path, report_server: ReportServer, capsys: pytest.CaptureFixture[str]
) -> None:
    report_server.bootstraps.append("boot-1")  # exchanged already

    assert exchange(_entry(tmp_path, "boot-1"), report_server.url, "the job") == USAGE

    assert capsys.readouterr().err.startswith(
        "the job got no credentials: the service refused the bootstrap report: HTTP 401 "
    )
