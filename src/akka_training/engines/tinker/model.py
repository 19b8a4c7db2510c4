"""The model an interactive run trains: the base model with a PEFT LoRA adapter, and an AdamW
optimizer over the adapter's weights. Each method is one Tinker primitive; the job's API calls
them one at a time, in the order the client sent them."""

from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from peft import LoraConfig, PeftModel, get_peft_model, set_peft_model_state_dict
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from akka_training.core.interactive import InteractiveLora
from akka_training.engines.tinker.losses import elementwise_loss
from akka_training.engines.tinker.wire import ForwardBackward

ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP = ("gate_proj", "up_proj", "down_proj")
UNEMBED = ("lm_head",)
OPTIMIZER_FILE = "optimizer.pt"


@dataclass
class AdamParams:
    learning_rate: float = 1e-4
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-12
    weight_decay: float = 0.0
    grad_clip_norm: float = 0.0

    @classmethod
    def of(cls, body: dict[str, Any]) -> AdamParams:
        fields = cls.__dataclass_fields__
        return cls(**{k: float(v) for k, v in body.items() if k in fields})


def target_modules(model: torch.nn.Module, lora: InteractiveLora) -> list[str]:
    wanted: list[str] = []
    if lora.train_attn:
        wanted += ATTENTION
    if lora.train_mlp:
        wanted += MLP
    if lora.train_unembed:
        wanted += UNEMBED
    present = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
    return [name for name in wanted if name in present]


class LoraModel:
    def __init__(self, path: str, lora: InteractiveLora) -> None:
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        torch.manual_seed(lora.seed if lora.seed is not None else 0)
        base = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
        self.modules = target_modules(base, lora)
        config = LoraConfig(
            r=lora.rank,
            lora_alpha=32,
            lora_dropout=0.0,
            target_modules=self.modules,
            task_type="CAUSAL_LM",
        )
        self.model: PeftModel = get_peft_model(base, config).to(self.device)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer: torch.optim.AdamW | None = None
        self.step = 0
        # What the forward_backward calls since the latest optimizer step added up to.
        self.pending_loss = 0.0
        self.pending_tokens = 0
        self.step_started: float | None = None

    def shared_base(self) -> torch.nn.Module:
        """A second model of the base that shares this model's frozen base weights (no copy,
        no load): the generation engine adds its own adapters to it. Training leaves those
        weights as they are (only the LoRA weights learn)."""
        inner = self.model.get_base_model()
        with torch.device("meta"):
            twin: Any = AutoModelForCausalLM.from_config(inner.config)
        for name, tensor in [*inner.named_parameters(), *inner.named_buffers()]:
            if "lora_" in name:
                continue
            owner, _, leaf = name.replace(".base_layer.", ".").rpartition(".")
            module = twin.get_submodule(owner)
            if isinstance(tensor, torch.nn.Parameter):
                module._parameters[leaf] = tensor
            else:
                module._buffers[leaf] = tensor
        if getattr(inner.config, "tie_word_embeddings", False):
            twin.tie_weights()
        left = [n for n, t in [*twin.named_parameters(), *twin.named_buffers()] if t.is_meta]
        if left:
            raise RuntimeError(f"the base model's weights {left[:3]} could not be shared")
        twin.generation_config = inner.generation_config
        made: torch.nn.Module = twin.eval()
        return made

    # --- forward and forward_backward ----------------------------------------------------------

    def forward_backward(
        self, request: ForwardBackward
    ) -> tuple[list[dict[str, np.ndarray]], dict[str, float]]:
        if self.step_started is None:
            self.step_started = time.monotonic()
        self.model.train(not request.forward_only)
        outputs: list[dict[str, np.ndarray]] = []
        total = 0.0
        tokens = 0
        with torch.set_grad_enabled(not request.forward_only):
            losses = []
            for datum in request.data:
                ids = torch.tensor([datum.tokens], dtype=torch.long, device=self.device)
                inputs = {
                    k: torch.as_tensor(v, device=self.device) for k, v in datum.inputs.items()
                }
                if "target_tokens" not in inputs:
                    raise ValueError("every datum needs loss_fn_inputs['target_tokens']")
                targets = inputs["target_tokens"].long().reshape(-1)
                logits = self.model(input_ids=ids).logits[0].float()
                logprobs = torch.log_softmax(logits, dim=-1).gather(-1, targets[:, None])[:, 0]
                floats = {k: v.float().reshape(-1) for k, v in inputs.items()}
                elementwise = elementwise_loss(request.loss_fn, logprobs, floats, request.config)
                losses.append(elementwise.sum())
                tokens += len(datum.tokens)
                outputs.append(
                    {
                        "logprobs": logprobs.detach().cpu().numpy(),
                        "elementwise_loss": elementwise.detach().cpu().numpy(),
                    }
                )
            loss = torch.stack(losses).sum()
            if not request.forward_only:
                loss.backward()
            total = float(loss.detach())
        if not request.forward_only:
            self.pending_loss += total
            self.pending_tokens += tokens
        return outputs, {"loss:sum": total}

    # --- optim_step ----------------------------------------------------------------------------

    def optim_step(self, adam: AdamParams) -> dict[str, float]:
        if self.optimizer is None:
            self.optimizer = torch.optim.AdamW(self.params, lr=adam.learning_rate)
        for group in self.optimizer.param_groups:
            group["lr"] = adam.learning_rate
            group["betas"] = (adam.beta1, adam.beta2)
            group["eps"] = adam.eps
            group["weight_decay"] = adam.weight_decay
        clip = adam.grad_clip_norm if adam.grad_clip_norm > 0 else float("inf")
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self.params, clip))
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        seconds = time.monotonic() - (self.step_started or time.monotonic())
        figures = {
            "loss": self.pending_loss,
            "tokens": float(self.pending_tokens),
            "learning_rate": adam.learning_rate,
            "grad_norm": grad_norm,
            "step_seconds": seconds,
        }
        if torch.cuda.is_available():
            figures["memory/peak_gib"] = torch.cuda.max_memory_allocated() / 2**30
        self.pending_loss, self.pending_tokens, self.step_started = 0.0, 0, None
        return figures

    # --- save_state and load_state -------------------------------------------------------------

    def save(self, directory: Path) -> tuple[Path, Path]:
        """The adapter (`weights/`) and the optimizer's state with the step (`state/`) under
        `directory`."""
        weights, state = directory / "weights", directory / "state"
        self.model.save_pretrained(str(weights))
        state.mkdir(parents=True, exist_ok=True)
        torch.save(
            {
                "step": self.step,
                "optimizer": None if self.optimizer is None else self.optimizer.state_dict(),
            },
            state / OPTIMIZER_FILE,
        )
        return weights, state

    def load(self, weights: Path, state: Path | None) -> None:
        """The adapter's weights from `weights`; with `state`, the optimizer and the step too
        (without it, a fresh optimizer)."""
        tensors = load_file(str(weights / "adapter_model.safetensors"), device=str(self.device))
        set_peft_model_state_dict(self.model, tensors)
        self.optimizer = None
        if state is not None:
            saved = torch.load(state / OPTIMIZER_FILE, map_location=self.device)
            self.step = int(saved["step"])
            if saved["optimizer"] is not None:
                self.optimizer = torch.optim.AdamW(self.params)
                self.optimizer.load_state_dict(saved["optimizer"])
        self.model.zero_grad(set_to_none=True)


def scratch() -> Path:
    return Path(tempfile.mkdtemp(prefix="akka-tinker-"))


def discard(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
