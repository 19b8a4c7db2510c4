"""The reward preview's estimate: whether a run fits in device memory and how long its policy
update takes, from the base model's size on disk, the plan's shape, the catalog envelope and the
pool's accelerator. No weights are loaded: the parameters are counted from the safetensors
headers (each file's first 8 bytes give the length of a JSON header naming every tensor's
shape) and the model's shape is read from ``config.json``.

The figures (docs/start-a-run.md says the same):

- base weights: every parameter at the run's precision (2 bytes in BF16 or FP16, 4 in FP32);
- adapter: LoRA's A and B matrices, rank x (in + out) for each targeted weight (``all-linear``:
  every 2-D weight but the embeddings and the output head; a list: the weights of the modules
  it names), at 16 bytes each: the FP32 weight, its gradient and Adam's two moments;
- activations: 34 bytes per token, hidden unit and layer in 16-bit (twice that in FP32), over
  one micro-batch (sft: ``batchSize`` sequences; grpo and gspo: one prompt group,
  ``generationsPerPrompt`` sequences), every sequence at ``maxSeqLength`` tokens;
- step time: 6 FLOPs per parameter (the embedding table left out unless tied to the output)
  per token of the step (sft: ``batchSize x gradientAccumulation`` sequences; grpo and gspo:
  ``promptsPerStep x generationsPerPrompt``; every one at ``maxSeqLength``), at `ASSUMED_MFU`
  of the accelerator's dense peak times the run's GPUs. Generation is not included.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from akka_training.core.plans import RL_METHODS
from akka_training.core.resolved import Settings
from akka_training.core.tasks import MemoryEstimate, PreviewEstimate
from akka_training.engines.model_cache import cached_model, is_remote
from akka_training.engines.peaks import peak_flops_by_name

GIB = float(1 << 30)
ASSUMED_MFU = 0.4
ACTIVATION_BYTES = 34  # per token, hidden unit and layer, in 16-bit
ADAPTER_BYTES = 16  # FP32 weight, gradient, Adam's two moments
EMBEDDING_NAMES = ("embed_tokens.weight", "wte.weight", "word_embeddings.weight")
OUTPUT_NAMES = ("lm_head.weight",)
# Longest safetensors header read (the format caps it at 100 MB).
MAX_HEADER = 100_000_000


class ModelFilesError(Exception):
    pass


def estimate(
    settings: Settings, device_memory_gib: float | None, accelerator: str | None
) -> PreviewEstimate:
    path = settings.base_model.path
    if is_remote(path):
        local = cached_model(path)
        if local is None:
            return PreviewEstimate(
                unavailable=f"the base model is in object storage ({path}) and not yet cached "
                "on this node; the estimate reads its files on disk and downloads no weights"
            )
        path = local
    try:
        shapes = tensor_shapes(Path(path))
        config = model_config(Path(path))
        _shape(config)
    except ModelFilesError as exc:
        return PreviewEstimate(unavailable=str(exc))
    return figures(settings, shapes, config, device_memory_gib, accelerator)


def figures(
    settings: Settings,
    shapes: dict[str, list[int]],
    config: dict[str, Any],
    device_memory_gib: float | None,
    accelerator: str | None,
) -> PreviewEstimate:
    cfg = settings.config
    precision = cfg.model.precision or "BF16"
    width = 4 if precision == "FP32" else 2
    parameters = sum(_numel(s) for s in shapes.values())
    tied = not any(n.endswith(OUTPUT_NAMES) for n in shapes)
    embeddings = 0 if tied else sum(_numel(s) for n, s in shapes.items() if _embedding(n))
    flop_parameters = parameters - embeddings
    if cfg.method in RL_METHODS:
        assert cfg.rl_hyperparams is not None
        rl = cfg.rl_hyperparams
        lora = rl.lora
        micro = rl.generations_per_prompt
        sequences = rl.prompts_per_step * rl.generations_per_prompt
        shape = (
            f"one prompt group of {micro} sequences a micro-batch, {sequences} sequences "
            f"({rl.prompts_per_step} prompts x {rl.generations_per_prompt}) a step"
        )
    else:
        assert cfg.hyperparams is not None
        hp = cfg.hyperparams
        lora = hp.lora
        micro = hp.training.batch_size
        sequences = hp.training.batch_size * hp.training.gradient_accumulation
        shape = f"{micro} sequences a micro-batch, {sequences} a step"
    seq = cfg.max_seq_length or 2048
    adapter_parameters = sum(
        lora.rank * (s[0] + s[1])
        for n, s in shapes.items()
        if len(s) == 2 and _targeted(n, lora.target_modules)
    )
    hidden, layers = _shape(config)
    weights_gib = parameters * width / GIB
    adapter_gib = adapter_parameters * ADAPTER_BYTES / GIB
    activations_gib = micro * seq * hidden * layers * ACTIVATION_BYTES * (width / 2) / GIB
    memory = MemoryEstimate(
        weights_gib=weights_gib,
        adapter_gib=adapter_gib,
        activations_gib=activations_gib,
        total_gib=weights_gib + adapter_gib + activations_gib,
    )
    rests_on = [
        f"{parameters:,} parameters counted from the model's safetensors headers, held at "
        f"{precision} ({width} bytes each) on every GPU (no sharding)",
        f"{adapter_parameters:,} LoRA parameters (rank {lora.rank} on "
        f"{_modules(lora.target_modules)}) at {ADAPTER_BYTES} bytes each: FP32 weight, "
        "gradient and Adam's two moments",
        f"activations of {ACTIVATION_BYTES * width // 2} bytes per token, hidden unit and layer "
        f"at {precision} (hidden size {hidden}, {layers} layers from config.json), {shape}, "
        f"every sequence at maxSeqLength {seq}",
        "not counted: the generation's KV cache and the CUDA context and allocator's slack",
    ]
    fits = None
    if device_memory_gib:
        fits = memory.total_gib <= device_memory_gib
        rests_on.append(f"compared with the catalog envelope's {device_memory_gib:g} GiB per GPU")
    else:
        rests_on.append("the catalog envelope states no device memory: the fit is not judged")
    tokens = sequences * seq
    peak = peak_flops_by_name(accelerator, precision) if accelerator else None
    step_seconds = None
    if peak is not None:
        gpus = settings.execution.gpus
        step_seconds = 6.0 * flop_parameters * tokens / (ASSUMED_MFU * peak * gpus)
        rests_on.append(
            f"the policy update's 6 FLOPs per parameter ({flop_parameters:,} without the input "
            f"embedding) per token of {tokens:,} tokens a step, at an assumed "
            f"{ASSUMED_MFU:.0%} MFU of the {accelerator}'s {peak / 1e12:g} TFLOP/s {precision} "
            f"dense peak x {gpus} GPU(s); generation and scoring not included"
        )
    else:
        rests_on.append(
            f"no step time: the pool's accelerator ({accelerator or 'not stated'}) has no known "
            f"{precision} peak"
        )
    return PreviewEstimate(
        parameters=parameters,
        flop_parameters=flop_parameters,
        adapter_parameters=adapter_parameters,
        precision=precision,
        memory=memory,
        device_memory_gib=device_memory_gib or None,
        fits=fits,
        tokens_per_step=tokens,
        peak_tflops=None if peak is None else peak / 1e12,
        assumed_mfu=ASSUMED_MFU if peak is not None else None,
        step_seconds=step_seconds,
        rests_on=rests_on,
    )


def tensor_shapes(directory: Path) -> dict[str, list[int]]:
    """Every tensor's shape, by name, from the safetensors headers under `directory`."""
    files = sorted(directory.glob("*.safetensors"))
    if not files:
        raise ModelFilesError(f"the base model at {directory} has no safetensors files to count")
    shapes: dict[str, list[int]] = {}
    for path in files:
        for name, shape in _header(path):
            shapes[name] = shape
    return shapes


def model_config(directory: Path) -> dict[str, Any]:
    try:
        body = json.loads((directory / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelFilesError(f"the base model's config.json cannot be read: {exc}") from exc
    if not isinstance(body, dict):
        raise ModelFilesError("the base model's config.json is not an object")
    return body


def _header(path: Path) -> Iterator[tuple[str, list[int]]]:
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise ModelFilesError(f"{path.name} is not a safetensors file")
        (length,) = struct.unpack("<Q", raw)
        if length > MAX_HEADER:
            raise ModelFilesError(f"{path.name} has a header of {length} bytes")
        try:
            header = json.loads(f.read(length))
        except ValueError as exc:
            raise ModelFilesError(f"{path.name}'s header is not JSON: {exc}") from exc
    for name, entry in header.items():
        if name != "__metadata__" and isinstance(entry, dict):
            yield name, [int(d) for d in entry.get("shape", [])]


def _shape(config: dict[str, Any]) -> tuple[int, int]:
    nested = config.get("text_config")
    text: dict[str, Any] = nested if isinstance(nested, dict) else config
    hidden = text.get("hidden_size") or config.get("hidden_size")
    layers = text.get("num_hidden_layers") or config.get("num_hidden_layers")
    if not isinstance(hidden, int) or not isinstance(layers, int):
        raise ModelFilesError(
            "the base model's config.json does not state hidden_size and num_hidden_layers"
        )
    return hidden, layers


def _numel(shape: list[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _embedding(name: str) -> bool:
    return name.endswith(EMBEDDING_NAMES)


def _targeted(name: str, targets: str | list[str]) -> bool:
    if not name.endswith(".weight") or _embedding(name) or name.endswith(OUTPUT_NAMES):
        return False
    if targets == "all-linear":
        return True
    module = name[: -len(".weight")].rsplit(".", 1)[-1]
    wanted = [targets] if isinstance(targets, str) else targets
    return module in wanted


def _modules(targets: str | list[str]) -> str:
    if targets == "all-linear":
        return "every 2-D weight but the embeddings and the output head"
    return ", ".join([targets] if isinstance(targets, str) else targets)
