"""The devices of this host: GPUs through NVML when there are any, otherwise one CPU device."""

from __future__ import annotations

from dataclasses import dataclass

import psutil


@dataclass(frozen=True)
class HostDevices:
    accelerator: str  # "cpu" or the GPU's product name
    count: int
    memory_gib: float  # per device
    host_ram_gib: float
    uuids: tuple[str, ...] = ()


def detect_devices() -> HostDevices:
    host_ram = round(psutil.virtual_memory().total / 2**30, 1)
    gpus = _nvml_gpus()
    if gpus:
        name, memory = gpus[0][0], gpus[0][1]
        return HostDevices(name, len(gpus), memory, host_ram, tuple(g[2] for g in gpus))
    return HostDevices("cpu", 1, host_ram, host_ram)


def _nvml_gpus() -> list[tuple[str, float, str]]:
    try:
        import pynvml
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
    except Exception:  # no driver on this host
        return []
    try:
        out = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(handle)
            name = name.decode() if isinstance(name, bytes) else name
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle).total / 2**30
            uuid = pynvml.nvmlDeviceGetUUID(handle)
            uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
            out.append((str(name), round(memory, 1), str(uuid)))
        return out
    finally:
        pynvml.nvmlShutdown()
