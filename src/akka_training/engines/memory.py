"""The memory figures of a training step.

On CUDA the step's peak is split into what is computable from the model and the optimizer and a
remainder: ``memory/weights`` (frozen parameters), ``memory/adapter`` (trainable parameters),
``memory/gradients`` (one gradient per trainable parameter, held until the optimizer step),
``memory/optimizer`` (the optimizer's state tensors), ``memory/activations`` (the rest of the
peak allocation: activations, temporaries, generation caches), ``memory/allocator`` (reserved by
PyTorch's caching allocator but not allocated at the peak), ``memory/driver`` (used on the device
outside PyTorch's pool: CUDA context, kernels, NCCL), ``memory/reserved`` and ``memory/peak``
(the peak reserved and allocated bytes). A reinforcement step adds ``memory/generation``: the
bytes generation allocated above what it started from (KV cache and sampling buffers). A step
that generates through vLLM (TRL's colocate mode) adds ``memory/vllm``: vLLM's share of the
device, ``vllm_gpu_memory_utilization`` times the device's memory, which vLLM fills with its copy
of the weights and its KV cache while it generates (with sleep mode it releases both during the
update, so the update's own figures above do not hold them).

On CPU there is no device split; the step reports ``memory/host_peak``, the process's peak
resident memory during the step (VmHWM after resetting it through ``/proc/self/clear_refs``).
All figures are bytes.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

# torch is imported where a device is measured: the host figures (the watchdog's) need none.
if TYPE_CHECKING:
    import torch

CLEAR_REFS = Path("/proc/self/clear_refs")
STATUS = Path("/proc/self/status")


class StepMemory:
    """Measures one step at a time: `begin()` when the step starts, `figures()` when it ends.
    `generation_begin()`/`generation_end()` bracket the generation inside a step."""

    def __init__(self, device: torch.device, vllm_share: float | None = None) -> None:
        self.cuda = device.type == "cuda"
        self._vllm_share = vllm_share
        self._device = device
        self._peak_allocated = 0
        self._peak_reserved = 0
        self._generation_base = 0
        self._host_reset = False
        self.generation: int | None = None

    def begin(self) -> None:
        self._peak_allocated = self._peak_reserved = 0
        self.generation = None
        if self.cuda:
            import torch

            torch.cuda.reset_peak_memory_stats(self._device)
        else:
            self._host_reset = reset_host_peak()

    def generation_begin(self) -> None:
        if not self.cuda:
            return
        import torch

        self._fold_peaks()
        torch.cuda.reset_peak_memory_stats(self._device)
        self._generation_base = torch.cuda.memory_allocated(self._device)

    def generation_end(self) -> None:
        if not self.cuda:
            return
        import torch

        peak = torch.cuda.max_memory_allocated(self._device)
        self.generation = max(0, peak - self._generation_base)
        self._fold_peaks()
        torch.cuda.reset_peak_memory_stats(self._device)

    def figures(
        self, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None
    ) -> dict[str, float]:
        if not self.cuda:
            # Without the reset VmHWM is the process's peak, not the step's: leave it out.
            peak = host_peak() if self._host_reset else None
            return {} if peak is None else {"memory/host_peak": float(peak)}
        import torch

        self._fold_peaks()
        weights, adapter = parameter_bytes(model)
        free, total = torch.cuda.mem_get_info(self._device)
        return device_split(
            peak_allocated=self._peak_allocated,
            peak_reserved=self._peak_reserved,
            weights=weights,
            adapter=adapter,
            optimizer=optimizer_bytes(optimizer),
            device_used=total - free,
            torch_reserved=torch.cuda.memory_reserved(self._device),
            generation=self.generation,
            vllm=None if self._vllm_share is None else int(self._vllm_share * total),
        )

    def _fold_peaks(self) -> None:
        import torch

        self._peak_allocated = max(
            self._peak_allocated, torch.cuda.max_memory_allocated(self._device)
        )
        self._peak_reserved = max(self._peak_reserved, torch.cuda.max_memory_reserved(self._device))


def device_split(
    *,
    peak_allocated: int,
    peak_reserved: int,
    weights: int,
    adapter: int,
    optimizer: int,
    device_used: int,
    torch_reserved: int,
    generation: int | None = None,
    vllm: int | None = None,
) -> dict[str, float]:
    """The split of a step's device peak (see the module docstring). Gradients are one per
    trainable parameter: the Trainer frees them after the optimizer step, before they could be
    measured, but they were held at the peak. `device_used` and `torch_reserved` are read now:
    the driver's share is what the device holds outside PyTorch's pool."""
    gradients = adapter
    activations = max(0, peak_allocated - weights - adapter - gradients - optimizer)
    out = {
        "memory/weights": weights,
        "memory/adapter": adapter,
        "memory/gradients": gradients,
        "memory/optimizer": optimizer,
        "memory/activations": activations,
        "memory/allocator": max(0, peak_reserved - peak_allocated),
        "memory/driver": max(0, device_used - torch_reserved),
        "memory/reserved": peak_reserved,
        "memory/peak": peak_allocated,
    }
    if generation is not None:
        out["memory/generation"] = generation
    if vllm is not None:
        out["memory/vllm"] = vllm
    return {k: float(v) for k, v in out.items()}


def parameter_bytes(model: torch.nn.Module) -> tuple[int, int]:
    """Bytes of the frozen and of the trainable parameters (shared tensors counted once)."""
    frozen = trainable = 0
    seen: set[int] = set()
    for param in model.parameters():
        if id(param) in seen:
            continue
        seen.add(id(param))
        size = param.numel() * param.element_size()
        if param.requires_grad:
            trainable += size
        else:
            frozen += size
    return frozen, trainable


def optimizer_bytes(optimizer: torch.optim.Optimizer | None) -> int:
    if optimizer is None:
        return 0
    import torch

    total = 0
    for state in optimizer.state.values():
        for value in state.values():
            if isinstance(value, torch.Tensor):
                total += value.numel() * value.element_size()
    return total


def reset_host_peak() -> bool:
    """Reset VmHWM to the current resident size (Linux); False where that is not possible."""
    try:
        CLEAR_REFS.write_text("5")
    except OSError:
        return False
    return True


def host_peak() -> int | None:
    """The process's peak resident memory in bytes since the last reset (VmHWM)."""
    return _status_kib("VmHWM")


def host_resident() -> int | None:
    return _status_kib("VmRSS")


def _status_kib(field: str) -> int | None:
    try:
        for line in STATUS.read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None
