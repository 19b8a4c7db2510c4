"""Where a job runs: host, process, pod, node and GPUs, for the `started` report."""

from __future__ import annotations

import os
import socket

import pynvml

from akka_training.core.reports import Gpu, Placement


def current_placement() -> Placement:
    """The pod and node come from ``POD_NAME``/``NODE_NAME`` (set by the cluster through the
    downward API); the GPUs are the ones ``CUDA_VISIBLE_DEVICES`` names, with their UUIDs and
    names from NVML when the driver answers."""
    return Placement(
        host=socket.gethostname(),
        pid=os.getpid(),
        pod=os.environ.get("POD_NAME") or None,
        node=os.environ.get("NODE_NAME") or None,
        gpus=visible_gpus(),
    )


def visible_gpus() -> list[Gpu]:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None or not visible.strip() or visible.strip() == "-1":
        return []
    entries = [v.strip() for v in visible.split(",") if v.strip()]
    described = _nvml_devices()
    gpus = []
    for position, entry in enumerate(entries):
        index = int(entry) if entry.isdigit() else position
        uuid, name = entry if entry.startswith(("GPU-", "MIG-")) else None, None
        for device in described:
            if device["index"] == index or (uuid is not None and device["uuid"] == uuid):
                uuid, name = device["uuid"], device["name"]
                index = device["index"]
                break
        gpus.append(Gpu(index=index, uuid=uuid, name=name))
    return gpus


def _nvml_devices() -> list[dict[str, object]]:
    """Every GPU the driver reports, by physical index; empty without a driver."""
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return []
    try:
        devices = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            devices.append(
                {
                    "index": index,
                    "uuid": _text(pynvml.nvmlDeviceGetUUID(handle)),
                    "name": _text(pynvml.nvmlDeviceGetName(handle)),
                }
            )
        return devices
    except pynvml.NVMLError:
        return []
    finally:
        pynvml.nvmlShutdown()


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value
