"""How an SFT run on TRL goes fast on a GPU, decided from plain facts (no torch here).

- **Padding-free batches** (CUDA with flash attention installed, text models): the batch's rows
  are concatenated into one sequence with position ids, and flash attention keeps them apart.
  TRL prepares (and cuts to ``maxSeqLength``, and drops) the rows exactly as it does for padded
  batches; only the collator is switched to TRL's padding-free one afterwards, so every data-fit
  count and the steps per epoch stay what they are without it, and the padding share is 0.
  Packing is not used: it changes how many rows a step takes.
- **Liger kernels** (``config.hyperparams.training.kernels: liger``): TRL's
  ``use_liger_kernel``; refused with its words on a CPU or without ``liger-kernel``.
- **Gradient checkpointing** on a GPU where memory asks for it: on when the weights plus one
  micro-batch's activations (about 34 bytes per token per hidden unit per layer in 16-bit
  precision, the usual estimate for a transformer layer without attention's square term) would
  take more than 80 % of the device; a CPU keeps TRL's default (on).
- **bf16** on a GPU unless the plan or its envelope says otherwise (`common.precision`).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

from akka_training.engines.failures import JobStartFailed

FLASH_ATTENTION = "flash_attention_2"
# Bytes of activations per token, hidden unit and layer kept for the backward pass (16-bit).
ACTIVATION_BYTES = 34
# Checkpointing turns on above this share of the device's memory.
MEMORY_SHARE = 0.8


@dataclass(frozen=True)
class SftSpeed:
    padding_free: bool
    attn_implementation: str | None
    liger: bool
    # None: TRL's default (on).
    gradient_checkpointing: bool | None


def flash_attention_installed() -> bool:
    return importlib.util.find_spec("flash_attn") is not None


def liger_installed() -> bool:
    return importlib.util.find_spec("liger_kernel") is not None


def liger_refusal(*, cuda: bool, installed: bool) -> str | None:
    """Why ``kernels: liger`` cannot run here, or None."""
    if not cuda:
        return (
            "config.hyperparams.training.kernels is liger, but this job runs on a CPU and "
            "Liger's kernels run on GPUs only: remove kernels from the plan or run it on a GPU "
            "pool"
        )
    if not installed:
        return (
            "config.hyperparams.training.kernels is liger, but the job's Python environment has "
            "no liger-kernel: install liger-kernel beside the trainer or remove kernels from "
            "the plan"
        )
    return None


def activation_bytes(batch_size: int, max_length: int, hidden_size: int, layers: int) -> int:
    return ACTIVATION_BYTES * batch_size * max_length * hidden_size * layers


def weight_bytes(hidden_size: int, layers: int, vocab_size: int) -> int:
    """A dense transformer's weights in 16-bit: about 12 h² per layer plus the input and output
    embedding tables."""
    return 2 * (12 * hidden_size * hidden_size * layers + 2 * vocab_size * hidden_size)


def needs_checkpointing(weight_bytes: int, activations: int, device_bytes: int) -> bool:
    return weight_bytes + activations > MEMORY_SHARE * device_bytes


def sft_speed(
    kernels: str | None,
    *,
    cuda: bool,
    image_text: bool,
    flash_attention: bool,
    liger: bool,
    weight_bytes: int = 0,
    activations: int = 0,
    device_bytes: int = 0,
) -> SftSpeed:
    """The run's fast path; raises `JobStartFailed` when the plan asks for kernels that cannot
    run here."""
    if kernels == "liger":
        refusal = liger_refusal(cuda=cuda, installed=liger)
        if refusal is not None:
            raise JobStartFailed(refusal)
    if not cuda:
        return SftSpeed(False, None, False, None)
    padding_free = flash_attention and not image_text
    return SftSpeed(
        padding_free=padding_free,
        attn_implementation=FLASH_ATTENTION if padding_free else None,
        liger=kernels == "liger",
        gradient_checkpointing=needs_checkpointing(weight_bytes, activations, device_bytes),
    )
