"""No secret of a job is left where a cluster records its launches: after a run on Ray (its
store in S3 with credentials in the trainer's settings), no file under the Ray node's temporary
directory (Ray's logs, among them ``runtime_env_agent.log``; the jobs' directories) holds the
store's secret key or any token but the job's spent bootstrap credential; on the local backend,
nothing under the job's directory does."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.helpers import (
    ensure_project,
    register_dataset,
    scripted_settings,
    sft_plan,
    start_run,
    wait_phase,
)
from tests.ray_cluster import RayHead
from tests.s3_server import SECRET_KEY, Bucket

pytestmark = [pytest.mark.slow]

# A secret the trainer mints (`storage.ids.new_secret`): a token, a login, a bootstrap credential.
MINTED = re.compile(r"(?<![A-Za-z0-9_-])akka_[A-Za-z0-9_-]{43}(?![A-Za-z0-9_-])")
SPENT = (
    "This bootstrap credential is not known to this trainer, or was already exchanged; a job "
    "exchanges it once, at its start."
)


def file_texts(root: Path) -> Iterator[tuple[Path, str]]:
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink():
            try:
                yield path, path.read_bytes().decode("latin-1")
            except OSError:  # a socket, or a file gone meanwhile
                continue


def secrets_under(root: Path) -> tuple[set[str], list[Path]]:
    """The minted secrets the files under `root` hold, and the files holding the store's key."""
    minted: set[str] = set()
    with_key: list[Path] = []
    for path, text in file_texts(root):
        minted.update(MINTED.findall(text))
        if SECRET_KEY in text:
            with_key.append(path)
    return minted, with_key


def exchange(url: str, bootstrap: str) -> httpx.Response:
    return httpx.post(
        f"{url}/v1/jobs/bootstrap", headers={"Authorization": f"Bearer {bootstrap}"}, timeout=10
    )


@pytest.mark.ray
def test_no_secret_is_left_in_rays_files_after_a_run(
    trainer_factory: Any, ray_head_factory: Any, s3_bucket: Bucket
) -> None:
    head: RayHead = ray_head_factory()
    settings = scripted_settings(storage=s3_bucket.storage_settings)
    settings["trainer"]["backend"] = "ray"
    settings["trainer"]["ray"] = {
        "address": head.dashboard_url,
        "python": sys.executable,
        "work-dir": str(head.jobs_dir),
    }
    trainer = trainer_factory(settings)
    ensure_project(trainer, "maths")
    register_dataset(trainer, "maths/train")
    run = start_run(trainer, sft_plan("maths", "maths/train", steps=3))
    done = wait_phase(trainer, run, "COMPLETED", "FAILED", timeout=120)
    assert done.phase == "COMPLETED", trainer.cli("training", "runs", "logs", run).stdout
    # It wrote its snapshots with the store's credentials it got by the exchange.
    assert any(k.startswith(f"runs/{run}/snapshots/") for k in s3_bucket.keys(f"runs/{run}/"))

    minted, with_key = secrets_under(head.root)

    assert with_key == []
    from ray.job_submission import JobSubmissionClient

    info = JobSubmissionClient(head.dashboard_url).get_job_info(f"akka-{run}-1")
    assert info.runtime_env is not None
    bootstrap = info.runtime_env["env_vars"]["AKKA_JOB_BOOTSTRAP"]
    # Ray's logs record the launch's environment: the bootstrap credential, and no other secret
    # (no job token).
    assert minted == {bootstrap}
    assert any(bootstrap in text for _, text in file_texts(head.root / "session_latest" / "logs"))
    # Spent: whoever reads it there gets nothing.
    answer = exchange(trainer.url, bootstrap)
    assert (answer.status_code, answer.json()["error"]["message"]) == (401, SPENT)


def test_no_secret_is_left_in_a_local_jobs_directory(
    trainer_factory: Any, s3_bucket: Bucket
) -> None:
    trainer = trainer_factory(scripted_settings(storage=s3_bucket.storage_settings))
    ensure_project(trainer, "maths")
    register_dataset(trainer, "maths/train")
    run = start_run(trainer, sft_plan("maths", "maths/train", steps=3))
    done = wait_phase(trainer, run, "COMPLETED", "FAILED", timeout=120)
    assert done.phase == "COMPLETED", trainer.cli("training", "runs", "logs", run).stdout
    jobs = trainer.home / "jobs"
    assert (jobs / run / "1").is_dir()  # the job's directory, with its log

    minted, with_key = secrets_under(jobs)

    assert (minted, with_key) == (set(), [])
