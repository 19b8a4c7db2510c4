from __future__ import annotations

import os

from akka_training.core.reports import Gpu
from akka_training.telemetry.placement import detect_placement, pod_name, visible_gpus
from akka_training.testing.fake_nvml import FakeGpu, FakeNvml

A, B, C = "GPU-aaaa", "GPU-bbbb", "GPU-cccc"


def _nvml() -> FakeNvml:
    return FakeNvml(
        [FakeGpu(A, index=0), FakeGpu(B, index=1, name="NVIDIA L4"), FakeGpu(C, index=2)]
    )


def test_pod_comes_from_pod_name_or_the_kubernetes_hostname() -> None:
    assert pod_name({"POD_NAME": "ray-worker-7", "HOSTNAME": "x"}) == "ray-worker-7"
    k8s = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "HOSTNAME": "raycluster-gpu-worker-abcde"}
    assert pod_name(k8s) == "raycluster-gpu-worker-abcde"
    assert pod_name({"HOSTNAME": "laptop"}) is None  # not in Kubernetes: no pod


def test_placement_names_host_pid_pod_node_and_the_visible_gpus() -> None:
    env = {"POD_NAME": "w-1", "NODE_NAME": "gpu-node-3", "CUDA_VISIBLE_DEVICES": "2,0"}
    nvml = _nvml()
    placement = detect_placement(nvml=nvml, env=env)
    assert placement.pid == os.getpid()
    assert (placement.pod, placement.node) == ("w-1", "gpu-node-3")
    assert placement.gpus == [
        Gpu(index=2, uuid=C, name="NVIDIA H200"),
        Gpu(index=0, uuid=A, name="NVIDIA H200"),
    ]
    assert nvml.init_calls == nvml.shutdown_calls == 1


def test_visible_devices_by_uuid_unset_and_empty() -> None:
    by_uuid = visible_gpus(nvml=_nvml(), env={"CUDA_VISIBLE_DEVICES": f"{B}"})
    assert by_uuid == [Gpu(index=1, uuid=B, name="NVIDIA L4")]
    assert [g.uuid for g in visible_gpus(nvml=_nvml(), env={})] == [A, B, C]
    assert visible_gpus(nvml=_nvml(), env={"CUDA_VISIBLE_DEVICES": ""}) == []
    # CUDA stops at the first invalid entry.
    assert [
        g.index for g in visible_gpus(nvml=_nvml(), env={"CUDA_VISIBLE_DEVICES": "1,-1,2"})
    ] == [1]


def test_without_nvml_only_the_indices_are_known() -> None:
    env = {"CUDA_VISIBLE_DEVICES": "0,1"}
    assert visible_gpus(nvml=FakeNvml.without_driver(), env=env) == [Gpu(index=0), Gpu(index=1)]
    assert visible_gpus(nvml=FakeNvml.without_driver(), env={}) == []
    placement = detect_placement(nvml=FakeNvml.without_driver(), env={})
    assert (placement.pod, placement.node, placement.gpus) == (None, None, [])
