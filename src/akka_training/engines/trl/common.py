"""What the TRL engine's SFT and GRPO flows share: the device, the base model and its processing
class, the adapter a run starts from, and the training arguments every run sets."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from peft import PeftModel
from transformers import (
    AutoModelForCausalLM,
    AutoModelForImageTextToText,
    AutoProcessor,
    AutoTokenizer,
    PreTrainedModel,
    TrainerCallback,
)

from akka_training.core.plans import Lora
from akka_training.core.resolved import Settings
from akka_training.engines.adapters import load_adapter, lora_config
from akka_training.engines.context import JobContext
from akka_training.engines.snapshots import download_adapter, restore_checkpoint

if TYPE_CHECKING:
    from akka_training.engines.datafit import ProcessingClass

_DTYPES = {"BF16": torch.bfloat16, "FP16": torch.float16, "FP32": torch.float32}


def training_device() -> torch.device:
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


def precision(settings: Settings, device: torch.device) -> str:
    """The run's precision; a CPU trains in FP32 whatever the plan says."""
    if device.type != "cuda":
        return "FP32"
    return settings.config.model.precision or "BF16"


def precision_args(settings: Settings, device: torch.device) -> dict[str, Any]:
    """Mixed-precision arguments for TRL's configs. TRL defaults to ``bf16=True``, which raises
    on a machine without a GPU: every flag is set explicitly."""
    if device.type != "cuda":
        return {"bf16": False, "fp16": False, "use_cpu": True}
    chosen = precision(settings, device)
    return {"bf16": chosen == "BF16", "fp16": chosen == "FP16", "use_cpu": False}


def common_args(job: JobContext, device: torch.device) -> dict[str, Any]:
    """Arguments every TRL run of a job sets: per-step logging (TRL's default of 10 averages
    figures over ten steps), no checkpoints of the trainer's own (the engine decides when to
    save), no report sinks, the plan's seed. A NaN or infinite loss is logged as it is (TRL
    would put the mean of the earlier losses in its place), so the step pipeline sees a
    diverged run (`core.monitors.NON_FINITE_LOSS`)."""
    return {
        "output_dir": str(job.workdir / "checkpoints"),
        "logging_steps": 1,
        "logging_nan_inf_filter": False,
        "save_strategy": "no",
        "report_to": [],
        "disable_tqdm": True,
        "seed": job.spec.settings.config.seed,
        "dataloader_num_workers": 0,
        **precision_args(job.spec.settings, device),
    }


def max_seq_length(settings: Settings) -> int:
    return settings.config.max_seq_length or min(2048, settings.base_model.context_length)


def is_image_text(settings: Settings) -> bool:
    return settings.base_model.modality == "image-text"


def load_base_model(
    settings: Settings, device: torch.device, attn_implementation: str | None = None
) -> tuple[PreTrainedModel, ProcessingClass]:
    """The base model (random weights in tests, real ones in production) and its tokenizer, or
    for an image-text model its processor. `attn_implementation` None keeps transformers'
    choice."""
    path = settings.base_model.path
    dtype = _DTYPES[precision(settings, device)]
    attention = {"attn_implementation": attn_implementation} if attn_implementation else {}
    if is_image_text(settings):
        model = AutoModelForImageTextToText.from_pretrained(path, dtype=dtype, **attention)
        processing: ProcessingClass = AutoProcessor.from_pretrained(path)
    else:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, **attention)
        processing = AutoTokenizer.from_pretrained(path)
    return model, processing


def setup_adapter(
    job: JobContext, model: PreTrainedModel, lora: Lora
) -> tuple[PreTrainedModel | PeftModel, Any]:
    """The model to train and the PEFT config to pass to the trainer. A run from a stored
    adapter (warm start, branch, continue) loads it, trainable, and passes no config (TRL would
    refuse a PeftModel with one); a fresh run passes the plan's LoRA config."""
    source = job.spec.settings.source
    if source is None:
        return model, lora_config(lora, model, image_text=is_image_text(job.spec.settings))
    directory = download_adapter(job.store, source.weights, job.workdir / "source-adapter")
    return load_adapter(model, directory), None


def resume_checkpoint(job: JobContext) -> Path | None:
    """The trainer checkpoint to resume from: this run's last snapshot (a new attempt), or for
    a continuation the source snapshot's full training state."""
    spec = job.spec
    root = job.workdir / "resume"
    if spec.resume is not None:
        point = spec.resume
        return restore_checkpoint(
            job.store, point.weights, point.training_state, root / f"checkpoint-{point.step}"
        )
    source = spec.settings.source
    if source is not None and source.kind == "continue" and source.training_state:
        return restore_checkpoint(
            job.store, source.weights, source.training_state, root / f"checkpoint-{source.step}"
        )
    return None


def start_step(job: JobContext) -> int:
    """The step a run's counting starts from: a continuation carries on from its source's."""
    source = job.spec.settings.source
    if source is not None and source.kind == "continue":
        return source.step
    return 0


def schedule_steps(resume_from: Path | None, total_steps: int) -> int:
    """The steps the learning-rate schedule spans. A run that restores a trainer state (a
    resume, a continuation) keeps the schedule that state was trained under, so that it trains
    exactly as the uninterrupted run would have; it is stretched only for a continuation that
    trains past the end of its source's schedule."""
    if resume_from is None:
        return total_steps
    try:
        saved = json.loads((resume_from / "trainer_state.json").read_text())
        planned = int(saved["max_steps"])
    except (OSError, ValueError, KeyError, TypeError):
        return total_steps
    return max(planned, total_steps)


class StopAt(TrainerCallback):
    """Ends training after `step` when the schedule spans more steps than the run trains."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step >= self.step:
            control.should_training_stop = True


def warmup_steps(ratio: float, total_steps: int) -> float:
    """The warmup TrainingArguments takes: it reads a float below 1 as a ratio of the total
    steps (transformers 5 replaced `warmup_ratio` with a float `warmup_steps`)."""
    return ratio if ratio < 1 else float(total_steps)


def steps_for(epochs: float, max_steps: int | None, steps_per_epoch: int) -> int:
    """The optimizer steps a run trains: `max_steps` when set, else whole epochs' worth."""
    if max_steps is not None:
        return max_steps
    return max(1, math.ceil(epochs * max(1, steps_per_epoch)))
