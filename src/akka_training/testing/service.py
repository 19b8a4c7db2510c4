"""`TrainerProcess`: a real trainer service in a child process, on a free loopback port, with
its own home, settings and CLI configuration; and a way to run the real `akka` CLI against it."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import yaml

from akka_training.client.trainer import TrainerClient
from akka_training.core.documents import deep_merge
from akka_training.testing.waiting import until


def free_port() -> int:
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """`count` distinct free loopback ports.

    Every socket stays bound until all are chosen, so the kernel cannot hand the same port out
    twice (choosing them one at a time can, and a Ray head refuses two components on one port).
    """
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for s in sockets:
            s.close()


class TrainerProcess:
    def __init__(
        self,
        home: Path,
        settings: dict[str, Any] | None = None,
        env: dict[str, str] | None = None,
        port: int | None = None,
    ) -> None:
        self.home = home
        self.home.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.config_path = home / "cli-config.yaml"
        self.settings_path = home / "settings.yaml"
        self.log_path = home / "service.log"
        base = {"trainer": {"home": str(home), "listen": {"host": "127.0.0.1", "port": self.port}}}
        self.settings = deep_merge(base, settings or {})
        self.extra_env = dict(env or {})
        self.proc: subprocess.Popen[bytes] | None = None
        # The clients handed out, closed with the service: a test that forgets one must not
        # leave its socket to be collected (and warned about) in a later test.
        self._clients: list[TrainerClient] = []

    @property
    def env(self) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("AKKA_ACCESS_TOKEN", "AKKA_CONTEXT", "TRAINER_URL")
        }
        env.update(
            {
                "AKKA_HOME": str(self.home),
                "AKKA_CONFIG": str(self.config_path),
                "PYTHONUNBUFFERED": "1",
                "NO_COLOR": "1",
            }
        )
        env.update(self.extra_env)
        return env

    def start(self, timeout: float = 120.0) -> TrainerProcess:
        self.settings_path.write_text(yaml.safe_dump(self.settings))
        log = open(self.log_path, "ab")  # noqa: SIM115 - kept open for the child's lifetime
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "akka_training.cli",
                "trainer",
                "serve",
                "--config",
                str(self.settings_path),
            ],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        until(
            self._healthy,
            what="the trainer to start",
            timeout=timeout,
            ignoring=(httpx.HTTPError,),
            detail=lambda: self.log()[-3000:],
        )
        return self

    def _healthy(self) -> bool:
        """Whether the trainer answers its health check; RuntimeError if it exited."""
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError(f"the trainer exited at start:\n{self.log()[-3000:]}")
        return httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    @property
    def admin_token(self) -> str:
        return (self.home / "admin-token").read_text().strip()

    def client(self, token: str | None = None) -> TrainerClient:
        client = TrainerClient(self.url, token or self.admin_token)
        self._clients.append(client)
        return client

    def cli(
        self,
        *args: str,
        env: dict[str, str] | None = None,
        input: str | None = None,
        check: bool = True,
        timeout: float = 300.0,
    ) -> subprocess.CompletedProcess[str]:
        full_env = self.env
        full_env.update(env or {})
        result = subprocess.run(
            [sys.executable, "-m", "akka_training.cli", *args],
            env=full_env,
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"akka {' '.join(args)} exited {result.returncode}\n"
                f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
            )
        return result

    def cli_json(self, *args: str, **kwargs: Any) -> Any:
        return json.loads(self.cli(*args, "-o", "json", **kwargs).stdout)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20.0) -> None:
        for client in self._clients:
            client.close()
        self._clients.clear()
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def kill(self) -> None:
        """SIGKILL the service; its jobs keep running (as after a crash)."""
        self.stop(signal.SIGKILL)

    def stop_jobs(self) -> None:
        """Kill every job the service launched on this host."""
        for handle_file in (self.home / "jobs").glob("*/*/handle.json"):
            try:
                pid = int(json.loads(handle_file.read_text())["pid"])
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError, ValueError, KeyError, OSError):
                pass

    def close(self) -> None:
        self.stop()
        self.stop_jobs()
