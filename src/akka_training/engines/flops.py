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

import torch

from akka_training.engines.peaks import PEAK_TFLOPS, peak_flops_by_name

__all__ = ["PEAK_TFLOPS", "flop_parameters", "mfu", "peak_flops", "peak_flops_by_name"]


def peak_flops(device: torch.device, precision: str) -> float | None:
    """The device's dense peak in FLOP/s for `precision`, or None when not known."""
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return peak_flops_by_name(name, precision)


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
