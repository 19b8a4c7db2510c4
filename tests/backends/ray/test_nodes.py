"""Devices per pool from Ray's node list: GPUs of the alive nodes carrying the pool's label, or
CPU slots on a CPU pool."""

from __future__ import annotations

from typing import Any

from akka_training.backends.ray.nodes import PoolNodes, observe_pools


def node(state: str = "ALIVE", pool: str | None = "a100", **resources: float) -> dict[str, Any]:
    labels = {"ray.io/node-id": "n"}
    if pool is not None:
        labels["pool"] = pool
    if resources.get("GPU"):
        labels["ray.io/accelerator-type"] = "A100"
    return {"state": state, "labels": labels, "resources_total": resources}


GPU_POOL = PoolNodes.of("training", "a100", "A100")
CPU_POOL = PoolNodes.of("cpu", "small", "cpu")


def test_a_gpu_pool_counts_the_gpus_of_its_alive_labelled_nodes() -> None:
    nodes = [
        node(GPU=8, CPU=64),
        node(GPU=4, CPU=32),
        node(state="DEAD", GPU=8, CPU=64),
        node(pool="other", GPU=8, CPU=64),
        node(pool=None, GPU=2, CPU=8),
    ]
    observed = observe_pools(nodes, [GPU_POOL], cpus_per_device=1)
    assert observed["training"].devices == 12
    assert observed["training"].accelerator == "A100"
    # A run's devices are on one node: the largest offers 8, not the 12 the pool sums to.
    assert observed["training"].largest_node == 8


def test_a_cpu_pool_counts_whole_slots_per_node() -> None:
    nodes = [node(pool="small", CPU=7), node(pool="small", CPU=4), node(pool="small", CPU=1.5)]
    observed = observe_pools(nodes, [CPU_POOL], cpus_per_device=2)
    # 3 + 2 + 0: a slot never spans two nodes.
    assert observed["cpu"].devices == 5
    assert observed["cpu"].accelerator == "cpu"


def test_a_pool_without_nodes_is_observed_empty() -> None:
    observed = observe_pools([node(pool="other", GPU=8)], [GPU_POOL, CPU_POOL], cpus_per_device=1)
    assert observed["training"].devices == 0 and observed["training"].accelerator is None
    assert observed["cpu"].devices == 0


def test_a_node_without_gpus_adds_none_to_a_gpu_pool() -> None:
    observed = observe_pools([node(CPU=16)], [GPU_POOL], cpus_per_device=1)
    assert observed["training"].devices == 0
