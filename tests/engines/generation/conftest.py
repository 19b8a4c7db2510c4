"""Fixtures for the generation engine: two LoRA adapters built with PEFT on the tiny chat model
(random, non-zero weights, so each answers differently from the base)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest


def build_adapter(base: Path, directory: Path, seed: int) -> Path:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(str(base))
    config = LoraConfig(
        r=4,
        lora_alpha=8,
        target_modules="all-linear",
        init_lora_weights=False,
        task_type="CAUSAL_LM",
    )
    get_peft_model(model, config).save_pretrained(str(directory))
    return directory


@pytest.fixture(scope="session")
def two_adapters(
    catalog: dict[str, dict[str, Any]], tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, Path, Path]:
    """The tiny chat model's directory and two adapters on it."""
    base = Path(catalog["tiny-chat"]["path"])
    root = tmp_path_factory.mktemp("adapters")
    return base, build_adapter(base, root / "first", 1), build_adapter(base, root / "second", 2)
