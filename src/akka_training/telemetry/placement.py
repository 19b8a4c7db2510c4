"""Where a job's process runs: host, pod, node and the GPUs it may use.

- pod: ``POD_NAME`` when the deployment sets it; otherwise, inside Kubernetes (where
  ``KUBERNETES_SERVICE_HOST`` is set), ``HOSTNAME``, which Kubernetes sets to the pod's name in
  every container, KubeRay's Ray pods included.
- namespace: ``POD_NAMESPACE`` when the deployment sets it (downward API
  ``metadata.namespace``); otherwise, inside Kubernetes, the service account's namespace file
  (`NAMESPACE_FILE`), which every pod that mounts its token has.
- node: ``NODE_NAME``, which operators add to the Ray worker pods from the downward API
  (``fieldRef: spec.nodeName``; see docs/observability.md). Outside Kubernetes it is absent.
- GPUs: the devices CUDA_VISIBLE_DEVICES leaves visible (indices or ``GPU-``/``MIG-`` UUIDs;
  every device when it is unset, none when it is empty), with their UUIDs and NVML indices from
  NVML. Without NVML the indices CUDA_VISIBLE_DEVICES names are returned without UUIDs.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from akka_training.core.reports import Gpu, Placement
from akka_training.telemetry.gpu import open_nvml, text

log = logging.getLogger(__name__)


def detect_placement(*, nvml: Any | None = None, env: Mapping[str, str] | None = None) -> Placement:
    """This process's placement, as the job reports it in its ``started`` report and
    publishes it as ``akka.optimize.training.gpu.placement``."""
    env = os.environ if env is None else env
    return Placement(
        host=socket.gethostname(),
        pid=os.getpid(),
        pod=pod_name(env),
        node=env.get("NODE_NAME") or None,
        gpus=visible_gpus(nvml=nvml, env=env),
    )


NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def namespace_name(
    env: Mapping[str, str] | None = None, namespace_file: Path = NAMESPACE_FILE
) -> str | None:
    """The Kubernetes namespace of this process's pod, or None outside Kubernetes."""
    env = os.environ if env is None else env
    if env.get("POD_NAMESPACE"):
        return env["POD_NAMESPACE"]
    if env.get("KUBERNETES_SERVICE_HOST"):
        try:
            return namespace_file.read_text().strip() or None
        except OSError:
            return None
    return None


def pod_name(env: Mapping[str, str]) -> str | None:
    if env.get("POD_NAME"):
        return env["POD_NAME"]
    if env.get("KUBERNETES_SERVICE_HOST") and env.get("HOSTNAME"):
        return env["HOSTNAME"]
    return None


def visible_gpus(*, nvml: Any | None = None, env: Mapping[str, str] | None = None) -> list[Gpu]:
    env = os.environ if env is None else env
    visible = _visible_devices(env)
    if visible == []:
        return []
    module, error = open_nvml(nvml)
    if module is None:
        log.debug("GPU UUIDs are unknown: NVML is not available (%s)", error)
        return [Gpu(index=int(v)) for v in visible or () if v.isdigit()]
    try:
        keys: list[str] = (
            visible if visible is not None else [str(i) for i in range(module.nvmlDeviceGetCount())]
        )
        gpus: list[Gpu] = []
        for key in keys:
            try:
                if key.isdigit():
                    handle = module.nvmlDeviceGetHandleByIndex(int(key))
                else:
                    handle = module.nvmlDeviceGetHandleByUUID(key)
                gpus.append(
                    Gpu(
                        index=int(module.nvmlDeviceGetIndex(handle)),
                        uuid=text(module.nvmlDeviceGetUUID(handle)),
                        name=text(module.nvmlDeviceGetName(handle)),
                    )
                )
            except module.NVMLError as exc:
                log.warning("CUDA_VISIBLE_DEVICES names %s, which NVML does not know: %s", key, exc)
        return gpus
    finally:
        module.nvmlShutdown()


def _visible_devices(env: Mapping[str, str]) -> list[str] | None:
    """CUDA_VISIBLE_DEVICES as a list; None when unset (every device is visible). CUDA stops
    at the first entry that is not a valid device, and so does this."""
    raw = env.get("CUDA_VISIBLE_DEVICES")
    if raw is None:
        return None
    devices: list[str] = []
    for entry in raw.split(","):
        entry = entry.strip()
        if not entry or entry.startswith("-"):
            break
        devices.append(entry)
    return devices
