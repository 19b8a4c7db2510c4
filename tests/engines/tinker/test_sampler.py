"""The sampler's generation engine of an interactive run's job holds no second copy of the base
model: it shares the training model's frozen weights, and answers as an engine that loaded the
base model itself."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from akka_training.core.interactive import InteractiveLora
from akka_training.engines.generation.engine import GenerationEngine
from akka_training.engines.generation.schema import BASE, GenerationRequest, SamplingParams
from akka_training.engines.tinker.model import LoraModel

pytestmark = [
    pytest.mark.slow,
    # PEFT's note that the unembedding's adapter is saved with its layer.
    pytest.mark.filterwarnings("ignore:Setting `save_embedding_layers`:UserWarning"),
]


def test_the_sampler_engine_shares_the_training_models_base_weights(
    dev_models: Path, tmp_path: Path
) -> None:
    base = dev_models / "tiny-chat"
    training = LoraModel(str(base), InteractiveLora(rank=8, seed=0))
    with torch.no_grad():
        for name, param in training.model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.5)
    shared = training.shared_base()
    held = {t.data_ptr() for t in training.model.parameters()}
    assert all(p.data_ptr() in held for p in shared.parameters())

    engine = GenerationEngine(base, model=shared)
    loaded = GenerationEngine(base)
    training.model.save_pretrained(str(tmp_path / "adapter"))
    engine.add_adapter("saved", tmp_path / "adapter")
    loaded.add_adapter("saved", tmp_path / "adapter")
    prompt = engine.text_prompt("What is 2 + 1?")
    greedy = SamplingParams(max_tokens=8, temperature=0, logprobs=True)
    requests = [GenerationRequest(prompt, "saved", greedy), GenerationRequest(prompt, BASE, greedy)]
    ours, theirs = engine.generate(requests), loaded.generate(requests)
    for mine, other in zip(ours, theirs, strict=True):
        assert mine.completions[0].token_ids == other.completions[0].token_ids
    # The adapter changes the answer: the rows did not both run the base model.
    assert engine.prompt_logprobs(prompt, "saved") != pytest.approx(
        engine.prompt_logprobs(prompt, BASE)
    )
    assert engine.prompt_logprobs(prompt, "saved") == pytest.approx(
        loaded.prompt_logprobs(prompt, "saved"), abs=1e-5
    )
