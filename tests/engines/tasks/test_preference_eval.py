"""The preference share's reference: a second adapter loaded beside the evaluated one (a dpo
run's own reference), or the base model, on the tiny chat model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import AutoModelForCausalLM, AutoTokenizer

from akka_training.engines.data import preference_examples
from akka_training.engines.tasks.preference_eval import REFERENCE_ADAPTER, pair_samples
from tests.engines.rows import pair_rows


def test_the_margin_is_measured_against_the_reference_adapter_when_there_is_one(
    catalog: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    path = catalog["tiny-chat"]["path"]
    torch.manual_seed(0)
    config = LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", init_lora_weights=False)
    base = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    get_peft_model(base, config).save_pretrained(str(tmp_path / "adapter"))
    fresh = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    model = PeftModel.from_pretrained(fresh, str(tmp_path / "adapter")).eval()
    model.load_adapter(str(tmp_path / "adapter"), adapter_name=REFERENCE_ADAPTER)
    tokenizer = AutoTokenizer.from_pretrained(path)
    examples = preference_examples(pair_rows(6))

    against_itself = pair_samples(tokenizer, model, examples, "preference", REFERENCE_ADAPTER)
    against_base = pair_samples(tokenizer, model, examples, "preference")

    # Measured against a copy of itself, a model prefers neither answer: every pair scores 1/2.
    assert [s["margin"] for s in against_itself] == [0.0] * 6
    assert [s["values"]["preference"] for s in against_itself] == [0.5] * 6
    # Against the base model the (random) adapter moves every margin.
    assert all(s["margin"] != 0.0 for s in against_base)
    # The evaluated adapter is the active one again, and its log-probabilities are the same.
    assert model.active_adapter == "default"
    assert [s["logps"] for s in against_itself] == [s["logps"] for s in against_base]
