"""A real S3 endpoint on loopback for the tests: moto's standalone server (`moto_server`), a
process of its own on a free port, speaking the S3 API over HTTP. Nothing mocks boto3: the
blob store, the service and the jobs reach it over the network as they would reach AWS, MinIO
or Ceph. It is stopped by its pid at the end of the session.

Fixtures: ``s3_server`` (one per session) and ``s3_bucket`` (a fresh, empty bucket per test,
with the settings a trainer needs to use it).
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from akka_training.testing.service import free_port
from akka_training.testing.waiting import until

ACCESS_KEY = "akka-test-access-key"
SECRET_KEY = "akka-test-secret-key-not-a-real-one"
REGION = "us-east-1"


class MotoServer:
    def __init__(self) -> None:
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.root = Path(tempfile.mkdtemp(prefix="akka-moto-"))
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> MotoServer:
        binary = shutil.which("moto_server") or str(Path(sys.executable).parent / "moto_server")
        if not Path(binary).exists():
            pytest.fail(
                "The S3 tests need moto's server: pip install 'moto[server]' (the dev extra).",
                pytrace=False,
            )
        log = open(self.root / "moto.log", "ab")  # noqa: SIM115 - kept for the child's lifetime
        self.proc = subprocess.Popen(
            [binary, "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "MOTO_ALLOW_NONEXISTENT_REGION": "1"},
            start_new_session=True,
        )
        log.close()
        try:
            until(
                self._answers,
                what="moto_server to answer",
                timeout=60,
                ignoring=(httpx.HTTPError,),
                detail=lambda: self.log()[-3000:],
            )
        except BaseException:
            self.stop()
            raise
        return self

    def _answers(self) -> bool:
        """Whether moto_server answers; RuntimeError if it exited."""
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError(f"moto_server exited:\n{self.log()[-3000:]}")
        return httpx.get(self.endpoint + "/moto-api/data.json", timeout=2).status_code == 200

    def log(self) -> str:
        path = self.root / "moto.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
            self.proc = None
        shutil.rmtree(self.root, ignore_errors=True)

    def client(self) -> Any:
        import boto3
        import botocore.config

        return boto3.session.Session().client(
            "s3",
            endpoint_url=self.endpoint,
            region_name=REGION,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            config=botocore.config.Config(s3={"addressing_style": "path"}),
        )


@dataclass
class Bucket:
    server: MotoServer
    name: str
    prefix: str = "trainer"

    @property
    def url(self) -> str:
        return f"s3://{self.name}/{self.prefix}"

    @property
    def s3_settings(self) -> dict[str, Any]:
        """`trainer.storage.s3` for this endpoint, the credentials included."""
        return {
            "endpoint-url": self.server.endpoint,
            "region": REGION,
            "path-style": True,
            "part-size-mib": 5,
            "access-key-id": ACCESS_KEY,
            "secret-access-key": SECRET_KEY,
        }

    @property
    def storage_settings(self) -> dict[str, Any]:
        return {"url": self.url, "s3": self.s3_settings}

    def keys(self, prefix: str = "") -> list[str]:
        client = self.server.client()
        out: list[str] = []
        for page in client.get_paginator("list_objects_v2").paginate(
            Bucket=self.name, Prefix=f"{self.prefix}/{prefix}"
        ):
            out.extend(item["Key"][len(self.prefix) + 1 :] for item in page.get("Contents", []))
        return sorted(out)

    def open_uploads(self) -> list[str]:
        answer = self.server.client().list_multipart_uploads(Bucket=self.name)
        return [u["Key"] for u in answer.get("Uploads", [])]


@pytest.fixture(scope="session")
def s3_server() -> Iterator[MotoServer]:
    server = MotoServer().start()
    yield server
    server.stop()


@pytest.fixture
def s3_bucket(s3_server: MotoServer) -> Bucket:
    name = f"akka-{secrets.token_hex(4)}"
    s3_server.client().create_bucket(Bucket=name)
    return Bucket(s3_server, name)
