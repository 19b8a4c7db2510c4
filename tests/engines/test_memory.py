"""The memory figures of a step."""

from __future__ import annotations

import numpy as np

from akka_training.engines.memory import (
    StepMemory,
    device_split,
    optimizer_bytes,
    parameter_bytes,
)

MIB = 2**20


def test_a_step_that_generates_through_vllm_adds_vllms_share() -> None:
    split = device_split(
        peak_allocated=1000 * MIB,
        peak_reserved=1200 * MIB,
        weights=600 * MIB,
        adapter=10 * MIB,
        optimizer=20 * MIB,
        device_used=1500 * MIB,
        torch_reserved=1200 * MIB,
        generation=150 * MIB,
        vllm=24_000 * MIB,
    )

    assert split["memory/vllm"] == 24_000 * MIB
    parts = ("weights", "adapter", "gradients", "optimizer", "activations")
    assert sum(split[f"memory/{p}"] for p in parts) == split["memory/peak"] == 1000 * MIB


def test_the_device_split_adds_up_to_the_peak() -> None:
    split = device_split(
        peak_allocated=1000 * MIB,
        peak_reserved=1200 * MIB,
        weights=600 * MIB,
        adapter=10 * MIB,
        optimizer=20 * MIB,
        device_used=1500 * MIB,
        torch_reserved=1200 * MIB,
        generation=150 * MIB,
    )

    parts = ("weights", "adapter", "gradients", "optimizer", "activations")
    assert sum(split[f"memory/{p}"] for p in parts) == split["memory/peak"] == 1000 * MIB
    assert split["memory/gradients"] == 10 * MIB
    assert split["memory/activations"] == 360 * MIB
    assert split["memory/allocator"] == 200 * MIB
    assert split["memory/driver"] == 300 * MIB
    assert split["memory/reserved"] == 1200 * MIB
    assert split["memory/generation"] == 150 * MIB
    assert "memory/generation" not in device_split(
        peak_allocated=1,
        peak_reserved=1,
        weights=0,
        adapter=0,
        optimizer=0,
        device_used=1,
        torch_reserved=1,
    )


def test_parameters_and_optimizer_state_are_measured() -> None:
    import torch

    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 2))
    model[0].requires_grad_(False)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad])
    model(torch.ones(1, 8)).sum().backward()
    optimizer.step()

    frozen, trainable = parameter_bytes(model)
    assert (frozen, trainable) == ((64 + 8) * 4, (16 + 2) * 4)
    # AdamW keeps two moments per trainable parameter (and a step count per tensor).
    assert optimizer_bytes(optimizer) >= 2 * trainable


def test_the_host_peak_of_a_cpu_step_follows_what_the_step_allocated() -> None:
    import torch

    memory = StepMemory(torch.device("cpu"))
    model = torch.nn.Linear(2, 2)

    memory.begin()
    quiet = memory.figures(model, None)["memory/host_peak"]
    memory.begin()
    block = np.ones(64 * MIB, dtype=np.uint8)  # touched: resident
    busy = memory.figures(model, None)["memory/host_peak"]
    del block
    memory.begin()
    after = memory.figures(model, None)["memory/host_peak"]

    assert busy - quiet > 48 * MIB
    assert after < busy - 48 * MIB
    assert not any(k != "memory/host_peak" for k in memory.figures(model, None))
