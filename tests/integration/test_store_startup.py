"""`akka trainer serve` with a blob store it cannot use: one message naming the store and the
settings, exit status 1, no traceback, and the database untouched (the store is reached before
the migration runs)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.slow


def serve(tmp_path: Path, storage: dict[str, object]) -> subprocess.CompletedProcess[str]:
    home = tmp_path / "home"
    settings = tmp_path / "settings.yaml"
    settings.write_text(
        yaml.safe_dump({"trainer": {"home": str(home), "catalog": [], "storage": storage}})
    )
    env = {**os.environ, "AKKA_CONFIG": str(tmp_path / "cli.yaml")}
    return subprocess.run(
        [sys.executable, "-m", "akka_training.cli", "trainer", "serve", "--config", str(settings),
         "--port", "0"],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip


def test_an_unreachable_store_stops_start_up_before_the_database(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    result = serve(
        tmp_path,
        {
            "url": "s3://akka/prod",
            "s3": {
                "endpoint-url": f"http://127.0.0.1:{closed}",
                "region": "us-east-1",
                "path-style": True,
                "access-key-id": "k",
                "secret-access-key": "s",
            },
        },
    )
    assert result.returncode == 1
    assert "Traceback" not in result.stdout + result.stderr
    assert result.stderr.strip().startswith(
        "error: The blob store s3://akka/prod could not be reached (Could not connect to the "
        f'endpoint URL: "http://127.0.0.1:{closed}/akka"'
    )
    assert "check trainer.storage.url, trainer.storage.s3.endpoint-url" in result.stderr
    assert not (tmp_path / "home" / "trainer.db").exists()


def test_an_unknown_store_scheme_is_a_bad_setting(tmp_path: Path) -> None:
    result = serve(tmp_path, {"url": "gs://bucket/prefix"})
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "error: Bad setting: trainer.storage.url 'gs://bucket/prefix' is not supported; use "
        "file:///PATH for a local directory or s3://BUCKET/PREFIX for an S3-compatible bucket."
    )
    assert not (tmp_path / "home" / "trainer.db").exists()
