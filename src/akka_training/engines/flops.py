"""Model FLOPs utilisation (MFU) of a policy update.

The update's FLOPs follow the usual dense-transformer approximation: 6 FLOPs per parameter per
token (2 for the forward pass, 4 for the backward pass), counting trainable and frozen
parameters alike. With a LoRA adapter the frozen weights get no weight gradient, so the real
backward is cheaper; the approximation keeps MFU comparable with full fine-tuning and with
other trainers that use it. Input embedding tables are left out (a lookup is not a matmul);
attention's sequence-squared term is left out too.

MFU divides those FLOPs per second by the device's dense peak for the run's precision, from a
table of known GPUs. An unknown device (or a CPU) has no peak, and then MFU is not reported.
"""

from __future__ import annotations

import re

import torch

# Dense (no sparsity) peak TFLOP/s per GPU, by the words of the CUDA device name ("NVIDIA H100
# PCIe" holds the words H100 and PCIE), most specific first, and by precision (FP32 without TF32).
PEAK_TFLOPS: tuple[tuple[str, dict[str, float]], ...] = (
    ("H100 NVL", {"BF16": 835.0, "FP16": 835.0, "FP32": 60.0}),
    ("H100 PCIe", {"BF16": 756.0, "FP16": 756.0, "FP32": 51.0}),
    ("H100", {"BF16": 989.0, "FP16": 989.0, "FP32": 67.0}),
    ("GH200", {"BF16": 989.0, "FP16": 989.0, "FP32": 67.0}),
    ("H200", {"BF16": 989.0, "FP16": 989.0, "FP32": 67.0}),
    ("H800", {"BF16": 989.0, "FP16": 989.0, "FP32": 67.0}),
    ("A100", {"BF16": 312.0, "FP16": 312.0, "FP32": 19.5}),
    ("A800", {"BF16": 312.0, "FP16": 312.0, "FP32": 19.5}),
    ("L40S", {"BF16": 362.0, "FP16": 362.0, "FP32": 91.6}),
    ("L4", {"BF16": 121.0, "FP16": 121.0, "FP32": 30.3}),
    ("A10", {"BF16": 125.0, "FP16": 125.0, "FP32": 31.2}),
    ("V100", {"FP16": 125.0, "FP32": 15.7}),
)


def peak_flops(device: torch.device, precision: str) -> float | None:
    """The device's dense peak in FLOP/s for `precision`, or None when not known."""
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return peak_flops_by_name(name, precision)


def peak_flops_by_name(name: str, precision: str) -> float | None:
    words = set(re.split(r"[\s\-_]+", name.upper()))
    for marker, peaks in PEAK_TFLOPS:
        if set(marker.upper().split()) <= words:
            tflops = peaks.get(precision)
            return None if tflops is None else tflops * 1e12
    return None


def flop_parameters(model: torch.nn.Module) -> int:
    """Parameters that take part in matmuls: all of them but the input embedding tables (a table
    tied to the output projection counts, as that projection is a matmul)."""
    embeddings = {
        id(p) for m in model.modules() if isinstance(m, torch.nn.Embedding) for p in m.parameters()
    }
    get_output = getattr(model, "get_output_embeddings", None)
    output = get_output() if callable(get_output) else None
    if output is not None and getattr(output, "weight", None) is not None:
        embeddings.discard(id(output.weight))
    total = 0
    seen: set[int] = set()
    for param in model.parameters():
        if id(param) in seen or id(param) in embeddings:
            continue
        seen.add(id(param))
        total += param.numel()
    return total


def update_flops(parameters: int, tokens: int) -> float:
    return 6.0 * parameters * tokens


def mfu(parameters: int, tokens: int, seconds: float, peak: float | None) -> float | None:
    if peak is None or seconds <= 0 or tokens <= 0:
        return None
    return update_flops(parameters, tokens) / seconds / peak
