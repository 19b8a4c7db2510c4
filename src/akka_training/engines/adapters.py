"""LoRA adapters: which modules one covers, how a run starts from a stored one, and what to
report about it.

For an image-text model the adapter covers the language backbone only. PEFT's ``all-linear``
would also adapt the vision (and audio) tower, so the target list is built here from
``named_modules()``, leaving out every module inside a tower or a multimodal projector, and the
adapted modules are checked after wrapping.
"""

from __future__ import annotations

import re
from pathlib import Path

import torch
from peft import LoraConfig, PeftModel
from peft.tuners.tuners_utils import BaseTunerLayer

from akka_training.core.plans import Lora
from akka_training.engines.failures import SourceUnavailable, out_of_memory

# Name components of the non-language parts of multimodal models (Gemma 3/3n/4, Qwen-VL, LLaVA,
# Idefics, Mllama, Phi-4-multimodal, ...).
TOWER_PARTS = frozenset(
    {
        "vision_tower",
        "audio_tower",
        "vision_model",
        "audio_model",
        "vision_encoder",
        "audio_encoder",
        "image_encoder",
        "visual",
        "vision",
        "audio",
        "multi_modal_projector",
        "mm_projector",
        "embed_vision",
        "embed_audio",
        "connector",
    }
)
OUTPUT_LAYERS = frozenset({"lm_head", "output", "embed_out"})


class AdapterError(RuntimeError):
    """The adapter would cover a module it must not (a vision or audio tower)."""


def lora_config(lora: Lora, model: torch.nn.Module, *, image_text: bool) -> LoraConfig:
    """The PEFT config of the plan's LoRA settings; for an image-text model with an explicit,
    language-only module list."""
    targets: str | list[str] = lora.target_modules
    if image_text:
        targets = language_modules(model, lora.target_modules)
        if not targets:
            raise AdapterError(
                f"no language-model module matches targetModules {lora.target_modules!r}"
            )
    return LoraConfig(
        r=lora.rank,
        # PEFT annotates lora_alpha as int but scales by lora_alpha / r: a fractional alpha
        # trains as written.
        lora_alpha=lora.alpha,  # type: ignore[arg-type]
        lora_dropout=lora.dropout,
        target_modules=targets,
        task_type="CAUSAL_LM",
    )


def language_modules(model: torch.nn.Module, targets: str | list[str]) -> list[str]:
    """Full names of the linear modules of the language backbone that `targets` selects:
    ``all-linear`` (every linear layer but the output projection), a list of module names (a
    module matches when its name ends with one), or a regular expression (full match)."""
    out = []
    for name, module in model.named_modules():
        if not isinstance(module, torch.nn.Linear) or is_tower_module(name):
            continue
        if name.split(".")[-1] in OUTPUT_LAYERS:
            continue
        if _selected(name, targets):
            out.append(name)
    return out


def is_tower_module(name: str) -> bool:
    return any(part in TOWER_PARTS for part in name.split("."))


def adapted_modules(model: torch.nn.Module) -> list[str]:
    """Names (relative to the base model) of the modules that carry the adapter."""
    names = []
    for name, module in model.named_modules():
        if isinstance(module, BaseTunerLayer):
            names.append(_relative(name))
    return sorted(names)


def check_language_only(modules: list[str]) -> None:
    towers = [m for m in modules if is_tower_module(m)]
    if towers:
        raise AdapterError(
            f"the adapter would cover {len(towers)} vision/audio modules, e.g. {towers[0]}"
        )


def load_adapter(base: torch.nn.Module, directory: Path) -> PeftModel:
    """A stored adapter on `base`, trainable (a warm start, a branch or a continuation)."""
    try:
        return PeftModel.from_pretrained(base, str(directory), is_trainable=True)
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        if out_of_memory(exc):
            raise  # reported as the memory that ran out, not as the adapter's fault
        raise SourceUnavailable(
            f"the adapter could not be loaded on the base model: {exc}"
        ) from exc


def _selected(name: str, targets: str | list[str]) -> bool:
    if targets == "all-linear":
        return True
    if isinstance(targets, str):
        return re.fullmatch(targets, name) is not None
    return any(name == t or name.endswith("." + t) for t in targets)


def _relative(name: str) -> str:
    for prefix in ("base_model.model.", "base_model."):
        if name.startswith(prefix):
            return name[len(prefix) :]
    return name
