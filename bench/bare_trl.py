"""A bare TRL script: the same SFT or GRPO configuration the engine benchmark runs through the
trainer, written as a user would write it by hand. Prints a JSON line with each step's end time
(perf_counter), the wall-clock time (time.time) of the first step's end and the process's peak
RSS.

    python bench/bare_trl.py sft|grpo MODEL_DIR DATA_JSONL STEPS
"""

from __future__ import annotations

import json
import re
import sys
import time

from datasets import Dataset
from peft import LoraConfig
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
from trl import GRPOConfig, GRPOTrainer, SFTConfig, SFTTrainer

FORMAT = re.compile(r"^#### [0-9]+$")


class StepTimes(TrainerCallback):
    def __init__(self) -> None:
        self.ends: list[float] = []
        self.first_wall: float | None = None

    def on_step_end(self, args: object, state: object, control: object, **kwargs: object) -> None:
        self.ends.append(time.perf_counter())
        if self.first_wall is None:
            self.first_wall = time.time()


def format_reward(completions: list, **kwargs: object) -> list[float]:
    return [0.5 if FORMAT.match(_text(c).strip()) else 0.0 for c in completions]


def correct_reward(completions: list, answer: list[str], **kwargs: object) -> list[float]:
    out = []
    for c, expected in zip(completions, answer, strict=True):
        got = re.findall(r"####\s*(-?[0-9]+)", _text(c))
        out.append(1.0 if got and got[-1] == expected.split("####")[-1].strip() else 0.0)
    return out


def _text(completion: object) -> str:
    if isinstance(completion, list):
        return str(completion[-1]["content"])
    return str(completion)


def main(method: str, model_dir: str, data: str, steps: int) -> None:
    with open(data) as f:
        rows = [json.loads(line) for line in f]
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    lora = LoraConfig(
        r=16, lora_alpha=32, lora_dropout=0.0, target_modules="all-linear", task_type="CAUSAL_LM"
    )
    common = dict(
        output_dir="/tmp/bare-trl",
        max_steps=steps,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        disable_tqdm=True,
        seed=42,
        bf16=False,
        fp16=False,
        use_cpu=True,
        dataloader_num_workers=0,
    )
    times = StepTimes()
    if method == "sft":
        args = SFTConfig(
            **common,
            per_device_train_batch_size=16,
            learning_rate=5e-3,
            max_length=128,
            assistant_only_loss=True,
        )
        trainer = SFTTrainer(
            model=model,
            args=args,
            train_dataset=Dataset.from_list(rows),
            processing_class=tokenizer,
            peft_config=lora,
        )
    else:
        examples = [
            {"prompt": r["messages"][:-1], "answer": r["messages"][-1]["content"]} for r in rows
        ]
        args = GRPOConfig(
            **common,
            per_device_train_batch_size=8,
            gradient_accumulation_steps=4,
            steps_per_generation=4,
            num_generations=8,
            max_completion_length=8,
            temperature=1.0,
            beta=0.0,
            learning_rate=2e-3,
        )
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=[format_reward, correct_reward],
            args=args,
            train_dataset=Dataset.from_list(examples),
            processing_class=tokenizer,
            peft_config=lora,
        )
    trainer.add_callback(times)
    trainer.train()
    peak = _vm_hwm()
    print(json.dumps({"ends": times.ends, "first_wall": times.first_wall, "peak_rss": peak}))


def _vm_hwm() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]))
