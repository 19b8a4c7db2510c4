"""The devices each pool's Ray nodes offer, from the cluster's node list.

A pool's nodes are the alive nodes labelled ``pool=<the pool's label>``. On a GPU pool a device
is one GPU (the node's ``GPU`` resource). On a CPU pool a device is ``cpus-per-device`` CPUs of
one node: a node with 8 CPUs and 2 CPUs per device offers 4 devices. Devices are counted per
node and added up, so a claim never counts on a fraction of a device split across nodes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from akka_training.backends.base import ObservedPool
from akka_training.backends.ray.entrypoint import POOL_LABEL, is_cpu_pool

# Ray sets this label on every node: the GPU's type ("H100", "A100", …), "" on a CPU-only node.
ACCELERATOR_LABEL = "ray.io/accelerator-type"


@dataclass(frozen=True)
class PoolNodes:
    """What observing needs of a pool: its name, the label value of its nodes and whether its
    devices are CPUs."""

    name: str
    label: str
    cpu: bool

    @classmethod
    def of(cls, name: str, label: str, accelerator: str) -> PoolNodes:
        return cls(name, label, is_cpu_pool(accelerator))


def observe_pools(
    nodes: Iterable[Mapping[str, Any]], pools: Iterable[PoolNodes], cpus_per_device: float
) -> dict[str, ObservedPool]:
    """Devices per pool name. `nodes` are rows of Ray's node list (``state``, ``labels``,
    ``resources_total``); every pool appears, with 0 devices when no alive node carries its
    label."""
    alive = [n for n in nodes if str(n.get("state", "")).upper() == "ALIVE"]
    out: dict[str, ObservedPool] = {}
    for pool in pools:
        members = [n for n in alive if (n.get("labels") or {}).get(POOL_LABEL) == pool.label]
        per_node = [node_devices(n, pool.cpu, cpus_per_device) for n in members]
        out[pool.name] = ObservedPool(
            devices=sum(per_node),
            accelerator=_accelerator(members, pool),
            largest_node=max(per_node, default=0),
        )
    return out


def node_devices(node: Mapping[str, Any], cpu: bool, cpus_per_device: float) -> int:
    resources = node.get("resources_total") or {}
    if cpu:
        return math.floor(float(resources.get("CPU", 0)) / cpus_per_device + 1e-9)
    return int(float(resources.get("GPU", 0)))


def _accelerator(members: list[Mapping[str, Any]], pool: PoolNodes) -> str | None:
    if pool.cpu:
        return "cpu"
    kinds = sorted(
        {
            str((n.get("labels") or {}).get(ACCELERATOR_LABEL) or "")
            for n in members
            if float((n.get("resources_total") or {}).get("GPU", 0)) > 0
        }
        - {""}
    )
    return ",".join(kinds) or None
