"""The TRL half of `scripts/gpu-smoke.sh`: a TRL SFT run and a TRL GRPO run on a model this
module builds (no hub), each measured with the engine's own figures and checked.

    python -m akka_training.engines.trl.smoke WORKDIR [--steps N] [--generation auto|hf|vllm]
        [--size smoke|tiny] [--only sft|grpo]
    python -m akka_training.engines.trl.smoke --adapter-check MODEL ADAPTER

Both runs take the settings the TRL engine takes on the same device: SFT its fast path
(`sft_speed`: padding-free with flash attention, gradient checkpointing where memory asks,
bf16 on a GPU), GRPO its generation (`generation`: vLLM colocate with sleep mode on a GPU that
has vLLM). For each it prints one PASS or FAIL line with steps/s, tokens/s, MFU (from the
device's peak in `peaks`), the last step's memory split (`memory`, with vLLM's share), and for
GRPO generation's share of the step; then whether the saved adapter loads in PEFT and in vLLM
(a child process of this module with ``--adapter-check``, so that its vLLM instance does not
meet the trainer's). The model is a Qwen3 on the development tokenizer: ``smoke`` (hidden 1024,
12 layers, about 150M parameters) on a GPU, ``tiny`` (hidden 128, 2 layers, head size 64, the
smallest vLLM's CPU attention takes) on a CPU.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import gc
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from akka_training.core.resolved import Generation
from akka_training.engines.trl.generation import generation_args, uses_vllm, vllm_installed
from akka_training.engines.trl.sft_speed import (
    activation_bytes,
    flash_attention_installed,
    liger_installed,
    sft_speed,
    weight_bytes,
)

SIZES: dict[str, dict[str, int]] = {
    "smoke": {"hidden": 1024, "layers": 12, "heads": 8, "intermediate": 3072},
    "tiny": {"hidden": 128, "layers": 2, "heads": 2, "intermediate": 256},
    # 0.5B-class in its layers (Qwen2.5-0.5B's shape), for bench/grpo_generation.py.
    "bench": {"hidden": 896, "layers": 24, "heads": 14, "intermediate": 4864},
}
HEAD_DIM = 64
MAX_LENGTH = 256
GIB = 2**30
MODULE = "akka_training.engines.trl.smoke"


@dataclass
class Measured:
    """What one run measured: figures for its line, and whether it passed."""

    name: str
    ok: bool = True
    figures: dict[str, str] = field(default_factory=dict)
    memory: dict[str, float] = field(default_factory=dict)
    problem: str = ""

    def line(self) -> str:
        head = "PASS" if self.ok else "FAIL"
        parts = [f"{k} {v}" for k, v in self.figures.items()]
        if self.problem:
            parts.append(self.problem)
        return f"{head} {self.name}: " + ", ".join(parts)

    def memory_line(self) -> str:
        if not self.memory:
            return f"     {self.name} memory: no device split (CPU)"
        split = ", ".join(
            f"{k.removeprefix('memory/')} {v / GIB:.2f}" for k, v in self.memory.items()
        )
        return f"     {self.name} memory (GiB): {split}"


def build_model(directory: Path, size: str) -> Path:
    """A Qwen3 of the given size on the development tokenizer, saved with it."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from akka_training.devmodels.tokenizer import train_tokenizer, wrap_tokenizer

    shape = SIZES[size]
    tokenizer = wrap_tokenizer(train_tokenizer(), vision=False)
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=shape["hidden"],
        intermediate_size=shape["intermediate"],
        num_hidden_layers=shape["layers"],
        num_attention_heads=shape["heads"],
        num_key_value_heads=shape["heads"],
        head_dim=HEAD_DIM,
        max_position_embeddings=2048,
        tie_word_embeddings=False,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    Qwen3ForCausalLM(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def _rows(count: int) -> list[dict[str, Any]]:
    """Chat rows of uneven lengths (so that padding would cost something)."""
    words = ["one", "two", "three", "four", "five", "six", "seven", "eight"]
    rows = []
    for i in range(count):
        question = " ".join(words[: 1 + i % len(words)])
        answer = " ".join(reversed(words[: 1 + (3 * i) % len(words)])) * (1 + i % 3)
        rows.append(
            {
                "messages": [
                    {"role": "user", "content": f"count {question}"},
                    {"role": "assistant", "content": answer},
                ]
            }
        )
    return rows


def _device() -> Any:
    import torch

    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


def _precision_args(cuda: bool) -> dict[str, Any]:
    return {"bf16": cuda, "fp16": False, "use_cpu": not cuda}


class _Meter:
    """A Trainer callback: the memory of each step (`StepMemory`) and the last step's split."""

    def __init__(self, device: Any, vllm_share: float | None = None) -> None:
        from akka_training.engines.memory import StepMemory

        self.memory = StepMemory(device, vllm_share=vllm_share)
        self.last: dict[str, float] = {}

    def callback(self) -> Any:
        from transformers import TrainerCallback

        meter = self

        class Callback(TrainerCallback):
            def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
                meter.memory.begin()

            def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
                meter.last = meter.memory.figures(kw["model"], kw.get("optimizer"))

        return Callback()


def _rates(trainer: Any, seconds: float, steps: int, cuda: bool, device: Any) -> dict[str, str]:
    from akka_training.engines.flops import flop_parameters, mfu, peak_flops

    tokens = max((float(e.get("num_tokens", 0)) for e in trainer.state.log_history), default=0.0)
    peak = peak_flops(device, "BF16" if cuda else "FP32")
    value = mfu(flop_parameters(trainer.model), int(tokens), seconds, peak)
    return {
        "steps/s": f"{steps / seconds:.2f}",
        "tokens/s": f"{tokens / seconds:.0f}",
        "MFU": "n/a (no peak for this device)" if value is None else f"{100 * value:.1f} %",
    }


def run_sft(model_dir: Path, workdir: Path, steps: int) -> tuple[Measured, Path | None]:
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    from trl.trainer.sft_config import SFTConfig
    from trl.trainer.sft_trainer import DataCollatorForLanguageModeling, SFTTrainer

    device = _device()
    cuda = device.type == "cuda"
    config = AutoConfig.from_pretrained(model_dir)
    batch = 8
    total = torch.cuda.get_device_properties(device).total_memory if cuda else 0
    speed = sft_speed(
        None,
        cuda=cuda,
        image_text=False,
        flash_attention=cuda and flash_attention_installed(),
        liger=liger_installed(),
        weight_bytes=weight_bytes(config.hidden_size, config.num_hidden_layers, config.vocab_size),
        activations=activation_bytes(
            batch, MAX_LENGTH, config.hidden_size, config.num_hidden_layers
        ),
        device_bytes=total,
    )
    attention = (
        {"attn_implementation": speed.attn_implementation} if speed.attn_implementation else {}
    )
    dtype = torch.bfloat16 if cuda else torch.float32
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype, **attention)
    checkpointing: dict[str, Any] = {}
    if speed.gradient_checkpointing is not None:
        checkpointing["gradient_checkpointing"] = speed.gradient_checkpointing
    args = SFTConfig(
        output_dir=str(workdir / "sft-out"),
        max_steps=steps,
        per_device_train_batch_size=batch,
        learning_rate=1e-4,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        disable_tqdm=True,
        max_length=MAX_LENGTH,
        assistant_only_loss=True,
        **_precision_args(cuda),
        **checkpointing,
    )
    trainer = SFTTrainer(
        model=model,
        args=args,
        train_dataset=Dataset.from_list(_rows(batch * steps)),
        processing_class=AutoTokenizer.from_pretrained(model_dir),
        peft_config=LoraConfig(r=16, lora_alpha=32, target_modules="all-linear"),
    )
    if speed.padding_free:
        collator = trainer.data_collator
        assert isinstance(collator, DataCollatorForLanguageModeling)
        trainer.data_collator = dataclasses.replace(
            collator, padding_free=True, pad_to_multiple_of=None
        )
    meter = _Meter(device)
    trainer.add_callback(meter.callback())
    started = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - started
    measured = Measured("trl sft")
    measured.figures = _rates(trainer, seconds, trainer.state.global_step, cuda, device)
    measured.figures["padding-free"] = "yes" if speed.padding_free else "no"
    measured.figures["checkpointing"] = "on" if speed.gradient_checkpointing is not False else "off"
    measured.figures["precision"] = "BF16" if cuda else "FP32"
    measured.memory = meter.last
    adapter = workdir / "sft-adapter"
    trainer.save_model(str(adapter))
    _free(trainer)
    return measured, adapter


def run_grpo(
    model_dir: Path, workdir: Path, steps: int, engine: str
) -> tuple[Measured, Path | None]:
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoTokenizer
    from trl.trainer.grpo_config import GRPOConfig
    from trl.trainer.grpo_trainer import GRPOTrainer

    device = _device()
    cuda = device.type == "cuda"
    generation = Generation(engine=engine)  # type: ignore[arg-type]
    present = generation.engine != "hf" and vllm_installed()
    vllm = uses_vllm(generation, cuda=cuda, vllm_present=present)
    prompts, group = 4, 4
    args = GRPOConfig(
        output_dir=str(workdir / "grpo-out"),
        max_steps=steps,
        per_device_train_batch_size=group,
        gradient_accumulation_steps=prompts,
        steps_per_generation=prompts,
        num_generations=group,
        max_completion_length=32,
        learning_rate=1e-4,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        disable_tqdm=True,
        beta=0.0,
        **_precision_args(cuda),
        **generation_args(generation, cuda=cuda, vllm_present=present, max_model_length=MAX_LENGTH),
    )

    def reward(completions: list[Any], **_: Any) -> list[float | None]:
        texts = [c[0]["content"] if isinstance(c, list) else c for c in completions]
        return [-abs(len(t) - 20) / 20 for t in texts]

    rows = [{"prompt": r["messages"][:1]} for r in _rows(prompts * steps)]
    trainer = GRPOTrainer(
        model=str(model_dir),
        reward_funcs=reward,
        args=args,
        train_dataset=Dataset.from_list(rows),
        processing_class=AutoTokenizer.from_pretrained(model_dir),
        peft_config=LoraConfig(r=16, lora_alpha=32, target_modules="all-linear"),
    )
    meter = _Meter(device, generation.vllm_gpu_memory_utilization if vllm and cuda else None)
    generating = [0.0]
    trainer._generate = _timed(  # type: ignore[method-assign]
        trainer._generate, meter, generating
    )
    trainer.add_callback(meter.callback())
    started = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - started
    measured = Measured("trl grpo")
    measured.figures = _rates(trainer, seconds, trainer.state.global_step, cuda, device)
    measured.figures["generation"] = "vllm colocate" if vllm else "transformers generate"
    measured.figures["generation share"] = f"{100 * generating[0] / seconds:.0f} %"
    rewards = [e["reward"] for e in trainer.state.log_history if "reward" in e]
    measured.figures["rewards"] = " ".join(f"{r:.3f}" for r in rewards)
    gaps = [
        e["sampling/sampling_logp_difference/mean"]
        for e in trainer.state.log_history
        if "sampling/sampling_logp_difference/mean" in e
    ]
    if gaps:
        # vLLM's log-probabilities against the trainer's, after the adapter was synced.
        measured.figures["vllm/trainer logp gap"] = f"{max(gaps):.4f}"
    measured.memory = meter.last
    if len(rewards) != steps:
        measured.ok = False
        measured.problem = f"{len(rewards)} of {steps} steps logged a reward"
    adapter = workdir / "grpo-adapter"
    trainer.save_model(str(adapter))
    _free(trainer)
    return measured, adapter


def _timed(generate: Any, meter: _Meter, total: list[float]) -> Any:
    @functools.wraps(generate)
    def timed(*args: Any, **kwargs: Any) -> Any:
        meter.memory.generation_begin()
        started = time.perf_counter()
        try:
            return generate(*args, **kwargs)
        finally:
            total[0] += time.perf_counter() - started
            meter.memory.generation_end()

    return timed


def _free(trainer: Any) -> None:
    import torch

    del trainer
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def peft_loads(model_dir: Path, adapter: Path) -> str:
    """Whether the adapter loads in PEFT and changes the model's output."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(model_dir)
    ids = torch.tensor([[1, 5, 6, 7]])
    with torch.no_grad():
        before = base(ids).logits
        adapted = PeftModel.from_pretrained(base, adapter)
        after = adapted(ids).logits
    return "yes" if not torch.allclose(before, after) else "yes, but it changes nothing"


def vllm_loads(model_dir: Path, adapter: Path) -> str:
    """Whether vLLM serves the adapter (in a child process, away from the trainer's vLLM)."""
    if not vllm_installed():
        return "not checked (no vLLM in this environment)"
    env = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    command = [sys.executable, "-m", MODULE, "--adapter-check", str(model_dir), str(adapter)]
    out = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode != 0 or not lines:
        tail = (out.stderr.strip().splitlines() or ["no output"])[-1]
        return f"no ({tail})"
    return "yes" if json.loads(lines[-1])["generated"] else "no (nothing generated)"


def adapter_check(model_dir: Path, adapter: Path) -> None:
    from vllm import LLM, SamplingParams
    from vllm.lora.request import LoRARequest

    llm = LLM(
        model=str(model_dir),
        enable_lora=True,
        max_lora_rank=16,
        max_model_len=MAX_LENGTH,
        gpu_memory_utilization=0.3,
    )
    outputs = llm.generate(
        ["count one two"],
        SamplingParams(temperature=0, max_tokens=8),
        lora_request=LoRARequest("smoke", 1, str(adapter)),
    )
    print(json.dumps({"generated": len(outputs[0].outputs[0].token_ids)}))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m akka_training.engines.trl.smoke")
    parser.add_argument("workdir", type=Path, nargs="?")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--generation", choices=["auto", "hf", "vllm"], default="auto")
    parser.add_argument("--size", choices=sorted(SIZES))
    parser.add_argument("--only", choices=["sft", "grpo"], help="run one of the two")
    parser.add_argument("--adapter-check", nargs=2, type=Path, metavar=("MODEL", "ADAPTER"))
    args = parser.parse_args(argv)
    if args.adapter_check:
        adapter_check(*args.adapter_check)
        return 0
    if args.workdir is None:
        parser.error("WORKDIR is needed")
    import torch

    workdir: Path = args.workdir
    workdir.mkdir(parents=True, exist_ok=True)
    size = args.size or ("smoke" if torch.cuda.is_available() else "tiny")
    model_dir = build_model(workdir / f"model-{size}", size)
    device = _device()
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(f"device: {name}; model: Qwen3 {size} at {model_dir}", flush=True)
    failed = False
    runs: tuple[tuple[str, Callable[[], tuple[Measured, Path | None]]], ...] = (
        ("sft", lambda: run_sft(model_dir, workdir, args.steps)),
        ("grpo", lambda: run_grpo(model_dir, workdir, args.steps, args.generation)),
    )
    for label, run in runs:
        if args.only not in (None, label):
            continue
        try:
            measured, adapter = run()
        except Exception as exc:  # the smoke reports every failure as its line and goes on
            measured, adapter = Measured(f"trl {label}", ok=False, problem=repr(exc)[:300]), None
        print(measured.line(), flush=True)
        print(measured.memory_line(), flush=True)
        failed |= not measured.ok
        if adapter is not None:
            peft = peft_loads(model_dir, adapter)
            served = vllm_loads(model_dir, adapter)
            print(
                f"{'PASS' if peft == 'yes' else 'FAIL'} trl {label} adapter loads in PEFT: {peft}"
            )
            vllm_ok = served.startswith(("yes", "not checked"))
            print(f"{'PASS' if vllm_ok else 'FAIL'} trl {label} adapter loads in vLLM: {served}")
            failed |= peft != "yes" or not vllm_ok
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
