"""Jobs on a Ray cluster (KubeRay on Kubernetes) through Ray's job submission API.

The service never joins the cluster: it speaks to the head's dashboard over HTTP
(`trainer.ray.address`) with Ray's own clients. One attempt is one Ray job whose submission id
is ``akka-RUN-ATTEMPT``; the handle stored with the attempt is that id. The job runs on a node
labelled ``pool=<the pool's label>`` holding the claim's devices as Ray resources (GPUs; CPUs
on a CPU pool), and reaches the service and the blob store at the addresses the deployment
gives it (`trainer.ray.trainer-url`, `trainer.ray.storage-url`). Admission stays the trainer's:
a job is submitted only once its claim is granted, so Ray never queues it for long.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

from akka_training.backends.base import (
    Backend,
    ClusterUnreachable,
    JobStatus,
    LaunchRefused,
    LaunchRequest,
    ObservedPool,
)
from akka_training.backends.ray import jobs
from akka_training.backends.ray.entrypoint import (
    POOL_LABEL,
    SpecTooLarge,
    encode_spec,
    entrypoint,
    is_cpu_pool,
    runtime_env,
    submission_id,
)
from akka_training.backends.ray.nodes import PoolNodes, observe_pools
from akka_training.core.errors import AkkaError

if TYPE_CHECKING:
    from akka_training.config.pools import PoolSpec
    from akka_training.config.settings import RayBackend as RaySettings


class RayNotInstalled(AkkaError):
    code = "bad-setting"


class RayBackend(Backend):
    """`Backend` on a Ray cluster. Every method makes one or two HTTP requests to the head, each
    bounded by `trainer.ray.request-timeout-seconds` (`submit-timeout-seconds` for a
    submission); a head that does not answer raises `ClusterUnreachable`."""

    name = "ray"

    def __init__(self, settings: RaySettings, pools: Sequence[PoolSpec]) -> None:
        self._sdk = load_sdk()
        self._settings = settings
        self._address = settings.address.rstrip("/")
        self._pools = {p.name: p for p in pools}
        # Absolute: the entrypoint inherits the PATH of whoever started Ray, not the service's.
        self._python = settings.python or sys.executable
        # Ray's job clients by purpose (their constructors call the head, so they are made on
        # first use): "submit" waits `submit-timeout-seconds`, "read" `request-timeout-seconds`.
        self._clients: dict[str, Any] = {}
        self._lock = threading.Lock()

    # --- Backend -----------------------------------------------------------------------------

    def launch(self, request: LaunchRequest) -> dict[str, Any]:
        sid = submission_id(request.run_id, request.attempt)
        handle = {"submission_id": sid}
        if self._known(sid):
            return handle
        pool = self._pools.get(request.pool)
        if pool is None:
            raise LaunchRefused(f"the deployment has no pool {request.pool!r}")
        cpu = is_cpu_pool(pool.accelerator)
        try:
            spec = encode_spec(request.job_spec)
        except SpecTooLarge as exc:
            raise LaunchRefused(str(exc)) from exc
        client = self._client("submit")
        try:
            client.submit_job(
                entrypoint=entrypoint(
                    self._python,
                    request.entry_module,
                    request.run_id,
                    request.attempt,
                    self._settings.work_dir,
                ),
                submission_id=sid,
                runtime_env=runtime_env(
                    self._settings.runtime_env, request.env, spec, cpu_only=cpu
                ),
                metadata={
                    "akka.run": request.run_id,
                    "akka.attempt": str(request.attempt),
                    "akka.pool": pool.name,
                },
                entrypoint_num_cpus=request.devices * self._settings.cpus_per_device,
                entrypoint_num_gpus=0 if cpu else request.devices,
                entrypoint_label_selector={POOL_LABEL: pool.label},
            )
        except Exception as exc:
            if jobs.already_exists(exc):
                return handle  # submitted by a call that overlapped this one
            raise jobs.submit_error(exc) from exc
        return handle

    def status(self, handle: dict[str, Any]) -> JobStatus:
        sid = handle["submission_id"]
        try:
            info = self._client("read").get_job_info(sid)
        except ClusterUnreachable:
            raise
        except Exception as exc:
            if jobs.is_not_found(exc):
                return JobStatus("missing", detail=f"Ray does not know the job {sid}")
            raise jobs.unreachable(exc, f"read the state of job {sid}") from exc
        state = getattr(info.status, "value", info.status)
        return jobs.job_status(
            str(state),
            info.driver_exit_code,
            getattr(info.error_type, "value", info.error_type),
            info.message,
        )

    def stop(self, handle: dict[str, Any], grace_seconds: float) -> None:
        # Ray waits RAY_JOB_STOP_WAIT_TIME_S (set on the Ray nodes) between SIGTERM and SIGKILL;
        # a grace period cannot travel with the request.
        sid = handle["submission_id"]
        try:
            self._client("read").stop_job(sid)
        except ClusterUnreachable:
            raise
        except Exception as exc:
            if jobs.is_not_found(exc):
                return
            raise jobs.unreachable(exc, f"stop job {sid}") from exc

    def logs(self, handle: dict[str, Any], offset: int = 0) -> tuple[str, int]:
        sid = handle["submission_id"]
        try:
            text = self._client("read").get_job_logs(sid)
        except ClusterUnreachable:
            raise
        except Exception as exc:
            if jobs.is_not_found(exc):
                return "", max(offset, 0)
            raise jobs.unreachable(exc, f"read the log of job {sid}") from exc
        return jobs.slice_log(text, offset)

    def observe(self) -> dict[str, ObservedPool]:
        try:
            nodes = self._sdk.list_nodes(self._address, self._settings.request_timeout_seconds)
        except Exception as exc:
            raise jobs.unreachable(exc, "list the nodes") from exc
        pools = [PoolNodes.of(p.name, p.label, p.accelerator) for p in self._pools.values()]
        return observe_pools(nodes, pools, self._settings.cpus_per_device)

    # --- helpers -----------------------------------------------------------------------------

    def _known(self, sid: str) -> bool:
        """Whether Ray already has the submission (a used id cannot be submitted again)."""
        try:
            self._client("read").get_job_info(sid)
        except ClusterUnreachable:
            raise
        except Exception as exc:
            if jobs.is_not_found(exc):
                return False
            raise jobs.submit_error(exc) from exc
        return True

    def _client(self, purpose: str) -> Any:
        with self._lock:
            client = self._clients.get(purpose)
            if client is None:
                timeout = (
                    self._settings.submit_timeout_seconds
                    if purpose == "submit"
                    else self._settings.request_timeout_seconds
                )
                try:
                    client = self._sdk.JobsClient(self._address, timeout)
                except Exception as exc:
                    raise jobs.unreachable(exc, f"reach the Ray head at {self._address}") from exc
                self._clients[purpose] = client
            return client


def load_sdk() -> ModuleType:
    """Ray's clients, imported only for a deployment whose backend is ``ray``: the rest of the
    trainer (and the bootstrap that starts jobs on the workers) never imports Ray."""
    try:
        from akka_training.backends.ray import sdk
    except ImportError as exc:
        raise RayNotInstalled(
            "trainer.backend is `ray` but Ray's job SDK cannot be imported "
            f"({exc}); install the ray extra: pip install 'akka-training[ray]' "
            "(Ray 2.60, with its `default` components)."
        ) from exc
    return sdk
