"""A real local Ray head for the Ray backend's tests.

`RayHead.start()` runs ``ray start --head --block`` in its own process group, on loopback only,
with every port chosen free (6379 and Ray's other defaults may be taken on a shared machine),
labels ``pool=default``, a dedicated temporary directory, usage stats off and ``RAY_AUTH_MODE``
set explicitly (a leftover ``~/.ray/auth_token`` would otherwise switch the head to token mode),
and the ``NODE_NAME``/``POD_NAME`` a KubeRay pod would get from the downward API.
Its processes, and every process started under it (Ray workers, job supervisors, the jobs
themselves), carry a marker in their environment; `stop()` kills exactly those, never another
Ray on the machine (``ray stop`` would kill every Ray of this user).

Fixtures: ``ray_head`` is one head shared by the session; ``ray_head_factory`` starts heads that
a test may stop (each is stopped at the end of the test in any case).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from akka_training.testing.service import free_ports
from akka_training.testing.waiting import until

REPO = Path(__file__).resolve().parents[1]
MARKER = "AKKA_TEST_RAY_HEAD"
START_TIMEOUT = 120.0


def require_ray() -> None:
    """Fail (never skip) when Ray is not installed: the Ray tests are part of CI."""
    if importlib.util.find_spec("ray") is None:
        pytest.fail(
            "The Ray backend tests need Ray 2.60: install the `ray` extra "
            "(pip install -e '.[ray]') into the test environment.",
            pytrace=False,
        )


class RayHead:
    """One local Ray head (with its worker processes) and the addresses to reach it."""

    def __init__(
        self,
        labels: str = "pool=default",
        num_cpus: int = 2,
        auth_token: str | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.labels = labels
        # Variables of the node's own (a worker's HOME, say), which its jobs inherit.
        self.extra_env = dict(env or {})
        self.num_cpus = num_cpus
        # With a token the head runs in Ray's token mode: every request must carry it.
        self.auth_token = auth_token
        # Short and under /tmp: Ray's unix sockets live below it and paths are length-limited.
        self.root = Path(tempfile.mkdtemp(prefix="akka-ray-", dir="/tmp"))
        self.marker = self.root.name
        # Chosen together, so no two of the head's components are handed the same port.
        self._ports = free_ports(9)
        self.gcs_port, self.dashboard_port = self._ports[:2]
        self.dashboard_url = f"http://127.0.0.1:{self.dashboard_port}"
        self.jobs_dir = self.root / "jobs"
        # What a KubeRay pod gets from the downward API (docs/deploy-ray.md); jobs report them.
        self.node_name = "akka-test-node"
        self.pod_name = f"{self.marker}-head"
        self.log_path = self.root / "ray-start.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_seconds = 0.0

    def start(self) -> RayHead:
        require_ray()
        began = time.monotonic()
        ports = {
            "--port": self.gcs_port,
            "--dashboard-port": self.dashboard_port,
            **dict(
                zip(
                    (
                        "--ray-client-server-port",
                        "--dashboard-agent-listen-port",
                        "--dashboard-agent-grpc-port",
                        "--runtime-env-agent-port",
                        "--metrics-export-port",
                        "--node-manager-port",
                        "--object-manager-port",
                    ),
                    self._ports[2:],
                    strict=True,
                )
            ),
        }
        argv = [
            *_ray_command(),
            "start",
            "--head",
            "--block",
            "--node-ip-address=127.0.0.1",
            "--dashboard-host=127.0.0.1",
            "--include-dashboard=true",
            f"--num-cpus={self.num_cpus}",
            "--num-gpus=0",
            f"--labels={self.labels}",
            f"--temp-dir={self.root}",
            "--object-store-memory=100000000",
            "--disable-usage-stats",
            *(f"{flag}={port}" for flag, port in ports.items()),
        ]
        log = open(self.log_path, "ab")  # noqa: SIM115 - kept open for the child's lifetime
        self.proc = subprocess.Popen(
            argv,
            env=self._env(),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()
        try:
            self._wait_ready(START_TIMEOUT)
        except BaseException:
            self.stop()
            raise
        self.started_seconds = time.monotonic() - began
        return self

    def stop(self) -> None:
        """Stop the head and everything started under it; remove its directory."""
        if self.proc is not None:
            _signal_group(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=3)
            except subprocess.TimeoutExpired:
                pass
            _signal_group(self.proc.pid, signal.SIGKILL)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            self.proc = None
        # Ray's workers, the job supervisors and the jobs run in process groups of their own.
        for proc in self.processes():
            try:
                proc.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(self.processes(), timeout=5)
        shutil.rmtree(self.root, ignore_errors=True)

    def processes(self) -> list[psutil.Process]:
        """This user's processes started under this head (found by the environment marker)."""
        found = []
        for proc in psutil.process_iter(["uids"]):
            try:
                if proc.info["uids"] is None or proc.info["uids"].real != os.getuid():
                    continue
                if proc.environ().get(MARKER) == self.marker:
                    found.append(proc)
            except psutil.Error:
                continue
        return found

    @property
    def client_env(self) -> dict[str, str]:
        """The environment a client of this head (the service) needs."""
        if self.auth_token:
            return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": self.auth_token}
        return {"RAY_AUTH_MODE": "disabled"}

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_ADDRESS")}
        env.pop("RAY_AUTH_TOKEN_PATH", None)
        if self.auth_token:
            env["RAY_AUTH_TOKEN"] = self.auth_token
        else:
            env.pop("RAY_AUTH_TOKEN", None)
        env.update(self.extra_env)
        env.update(
            {
                MARKER: self.marker,
                "NODE_NAME": self.node_name,
                "POD_NAME": self.pod_name,
                # Explicit: with the mode unset, a token file in ~/.ray turns token auth on.
                "RAY_AUTH_MODE": "token" if self.auth_token else "disabled",
                "RAY_USAGE_STATS_ENABLED": "0",
                # A single-node cluster: Ray then binds every server (the client server, the
                # node's own address) to loopback instead of this host's network address.
                "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
                # How long `ray job stop` waits between SIGTERM and SIGKILL.
                "RAY_JOB_STOP_WAIT_TIME_S": "5",
                # The workers import akka_training from this checkout, as an image would have
                # it installed.
                "PYTHONPATH": os.pathsep.join(
                    p for p in (str(REPO / "src"), str(REPO), env.get("PYTHONPATH", "")) if p
                ),
            }
        )
        return env

    def _wait_ready(self, timeout: float) -> None:
        """Until the dashboard answers, the node is alive with its labels, and jobs can be
        listed (the job agent is up)."""
        until(
            self._started,
            what="the Ray head to get ready",
            timeout=timeout,
            interval=0.25,
            detail=lambda: self.log()[-4000:],
        )

    def _started(self) -> bool:
        """Whether the head is ready; RuntimeError if `ray start` exited."""
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError(f"ray start exited {self.proc.returncode}:\n{self.log()[-4000:]}")
        return self._ready()

    def _ready(self) -> bool:
        headers = {"Authorization": f"Bearer {self.auth_token}"} if self.auth_token else {}
        try:
            nodes = httpx.get(
                f"{self.dashboard_url}/api/v0/nodes",
                params={"detail": "1"},
                headers=headers,
                timeout=5,
            )
            if nodes.status_code != 200:
                return False
            rows = nodes.json()["data"]["result"]["result"]
            key, _, value = self.labels.partition("=")
            if not any(r["state"] == "ALIVE" and r["labels"].get(key) == value for r in rows):
                return False
            jobs = httpx.get(f"{self.dashboard_url}/api/jobs/", headers=headers, timeout=5)
            return jobs.status_code == 200
        except (httpx.HTTPError, ValueError, KeyError):
            return False


@pytest.fixture(scope="session")
def ray_head() -> Iterator[RayHead]:
    """One Ray head shared by every Ray test of the session; never stopped by a test."""
    head = RayHead().start()
    yield head
    head.stop()


@pytest.fixture
def ray_head_factory() -> Iterator[Callable[..., RayHead]]:
    """Heads of a test's own (to stop during the test); each is stopped at its end."""
    heads: list[RayHead] = []

    def make(**kwargs: object) -> RayHead:
        head = RayHead(**kwargs)  # type: ignore[arg-type]
        heads.append(head)
        return head.start()

    yield make
    for head in heads:
        head.stop()


def _ray_command() -> list[str]:
    script = Path(sys.executable).parent / "ray"
    if script.exists():
        return [str(script)]
    return [
        sys.executable,
        "-c",
        "import sys; from ray.scripts.scripts import main; sys.exit(main())",
    ]


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
