"""The development models load with the ordinary Hugging Face classes, generate, and take one
real TRL SFT step and one GRPO step each."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from datasets import Dataset
from peft import LoraConfig
from PIL import Image
from transformers import (
    AutoModelForCausalLM,
    AutoModelForImageTextToText,
    AutoProcessor,
    AutoTokenizer,
    BatchEncoding,
)
from trl.trainer.grpo_config import GRPOConfig
from trl.trainer.grpo_trainer import GRPOTrainer
from trl.trainer.sft_config import SFTConfig
from trl.trainer.sft_trainer import SFTTrainer

# Every test here loads the development models and runs real generation and training steps.
pytestmark = pytest.mark.slow

CHAT = [
    {"role": "user", "content": "What is 12 + 35?"},
    {"role": "assistant", "content": "12 + 35 = 47. #### 47"},
]


def test_tiny_chat_generates_and_digits_split(catalog: dict[str, dict[str, Any]]) -> None:
    path = catalog["tiny-chat"]["path"]
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path)

    assert tokenizer.tokenize("1234") == ["1", "2", "3", "4"]
    inputs = tokenizer.apply_chat_template(
        CHAT[:1], add_generation_prompt=True, return_dict=True, return_tensors="pt"
    )
    assert isinstance(inputs, BatchEncoding)  # return_dict=True
    out = model.generate(**inputs, max_new_tokens=5, do_sample=False)
    assert out.shape[1] == inputs["input_ids"].shape[1] + 5
    masks = tokenizer.apply_chat_template(CHAT, return_assistant_tokens_mask=True, return_dict=True)
    assert isinstance(masks, BatchEncoding)
    answer = [t for t, m in zip(masks["input_ids"], masks["assistant_masks"], strict=True) if m]
    assert tokenizer.decode(answer) == "12 + 35 = 47. #### 47<|im_end|>"


def test_tiny_vision_generates_from_an_image(catalog: dict[str, dict[str, Any]]) -> None:
    path = catalog["tiny-vision"]["path"]
    processor = AutoProcessor.from_pretrained(path)
    model = AutoModelForImageTextToText.from_pretrained(path)
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Hi?"}]}]
    text = processor.apply_chat_template(messages, add_generation_prompt=True)
    inputs = processor(text=[text], images=[[_image()]], return_tensors="pt")

    out = model.generate(**inputs, max_new_tokens=4, do_sample=False)
    assert out.shape[1] == inputs["input_ids"].shape[1] + 4
    assert model.model.vision_tower is not None


def test_one_sft_step_and_one_grpo_step_on_tiny_chat(
    catalog: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    path = catalog["tiny-chat"]["path"]
    sft = SFTTrainer(
        model=AutoModelForCausalLM.from_pretrained(path),
        args=_sft_args(tmp_path),
        train_dataset=Dataset.from_list([{"messages": CHAT}] * 2),
        processing_class=AutoTokenizer.from_pretrained(path),
        peft_config=LoraConfig(r=4, target_modules="all-linear"),
    )
    assert sft.train().global_step == 1

    grpo = GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(path),
        reward_funcs=_length_reward,
        args=_grpo_args(tmp_path),
        train_dataset=Dataset.from_list([{"prompt": CHAT[:1]}] * 2),
        processing_class=AutoTokenizer.from_pretrained(path),
        peft_config=LoraConfig(r=4, target_modules="all-linear"),
    )
    assert grpo.train().global_step == 1


def test_one_sft_step_with_an_image_and_one_grpo_step_on_tiny_vision(
    catalog: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    path = catalog["tiny-vision"]["path"]
    row = {
        "images": [_image()],
        "messages": [
            {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Colour?"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "red"}]},
        ],
    }
    sft = SFTTrainer(
        model=AutoModelForImageTextToText.from_pretrained(path),
        args=_sft_args(tmp_path),
        train_dataset=Dataset.from_list([row] * 2),
        processing_class=AutoProcessor.from_pretrained(path),
        peft_config=LoraConfig(r=4, target_modules=r".*language_model.*\.(q|k|v|o)_proj"),
    )
    assert sft.train().global_step == 1

    grpo = GRPOTrainer(
        model=AutoModelForImageTextToText.from_pretrained(path),
        reward_funcs=_length_reward,
        args=_grpo_args(tmp_path),
        train_dataset=Dataset.from_list([{"prompt": CHAT[:1]}] * 2),
        processing_class=AutoProcessor.from_pretrained(path),
        peft_config=LoraConfig(r=4, target_modules=r".*language_model.*\.(q|k|v|o)_proj"),
    )
    assert grpo.train().global_step == 1


def _sft_args(tmp_path: Path) -> SFTConfig:
    return SFTConfig(
        output_dir=str(tmp_path / "sft"),
        max_steps=1,
        per_device_train_batch_size=2,
        bf16=False,
        use_cpu=True,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        assistant_only_loss=True,
        max_length=128,
    )


def _grpo_args(tmp_path: Path) -> GRPOConfig:
    return GRPOConfig(
        output_dir=str(tmp_path / "grpo"),
        max_steps=1,
        per_device_train_batch_size=4,
        num_generations=2,
        max_completion_length=8,
        bf16=False,
        use_cpu=True,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        beta=0.0,
    )


def _length_reward(completions: list[Any], **_: Any) -> list[float | None]:
    return [float(len(str(c))) for c in completions]


def _image() -> Image.Image:
    gen = torch.Generator().manual_seed(0)
    pixels = (torch.rand(24, 40, 3, generator=gen) * 255).to(torch.uint8).numpy()
    return Image.fromarray(pixels)
