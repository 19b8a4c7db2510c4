"""Build the development models: tiny random-weight models in the ordinary Hugging Face layout,
so that the real loading, training and saving code runs on them in tests and in the demo.

- ``tiny-chat``: a Qwen3 causal language model (hidden size 64, 2 layers).
- ``tiny-vision``: a Gemma 3 image-text model (a SigLIP vision tower, a 2-layer language model)
  with its processor. Gemma 4 and Qwen2-VL processors need a video processor, which needs
  torchvision; the training stack does not install it, so the image-text model is a Gemma 3.

A build is deterministic (seeded weights, a tokenizer trained on a fixed corpus), atomic (built
in a temporary directory, then renamed into place) and idempotent (a model already built by the
same `BUILDER_VERSION` is kept). Each model directory holds ``akka-devmodel.json`` with its
`revision`, the sha256 over its files.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from transformers import (
    Gemma3Config,
    Gemma3ForConditionalGeneration,
    Gemma3Processor,
    GenerationConfig,
    PreTrainedModel,
    Qwen3Config,
    Qwen3ForCausalLM,
)
from transformers.models.gemma3.image_processing_pil_gemma3 import Gemma3ImageProcessorPil
from transformers.utils import logging as hf_logging

from akka_training.devmodels.catalog import (
    BUILDER_VERSION,
    CONTEXT_LENGTH,
    MARKER,
    catalog_entry,
)
from akka_training.devmodels.tokenizer import (
    IMAGE_END,
    IMAGE_SOFT,
    IMAGE_START,
    train_tokenizer,
    wrap_tokenizer,
)

SEED = 1234
# Pixels per side of the images the vision model takes (a processor resizes any image to it).
IMAGE_SIZE = 32
IMAGE_TOKENS = 4


def build_dev_models(dest: Path) -> list[dict[str, Any]]:
    """Build (or keep) every development model under `dest` and return their catalog entries
    (the shape of `akka_training.core.catalog.CatalogModel`, camelCase keys)."""
    dest = Path(dest).resolve()
    dest.mkdir(parents=True, exist_ok=True)
    return [_build_one(dest, model_id, builder) for model_id, builder in _BUILDERS.items()]


def directory_revision(directory: Path) -> str:
    """sha256 over the relative paths and contents of every file but the marker, in path order."""
    digest = hashlib.sha256()
    for path in sorted(p for p in directory.rglob("*") if p.is_file() and p.name != MARKER):
        digest.update(path.relative_to(directory).as_posix().encode())
        digest.update(b"\0")
        digest.update(path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()


# --- one model -----------------------------------------------------------------------------------


def _build_one(dest: Path, model_id: str, builder: Callable[[Path], str]) -> dict[str, Any]:
    final = dest / model_id
    existing = _read_marker(final)
    if existing is not None and existing.get("builder") == BUILDER_VERSION:
        return catalog_entry(model_id, final, existing["revision"], existing["modality"])

    work = Path(tempfile.mkdtemp(prefix=f".build-{model_id}-", dir=dest))
    try:
        with _quiet_progress():
            modality = builder(work)
        revision = directory_revision(work)
        marker = {"id": model_id, "builder": BUILDER_VERSION, "revision": revision}
        marker |= {"modality": modality, "contextLength": CONTEXT_LENGTH}
        (work / MARKER).write_text(json.dumps(marker, indent=2) + "\n")
        _make_readable(work)
        _move_into_place(work, final)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    built = _read_marker(final)
    if built is None:
        raise RuntimeError(f"development model {model_id} was not built at {final}")
    return catalog_entry(model_id, final, built["revision"], built["modality"])


def _move_into_place(work: Path, final: Path) -> None:
    """Rename `work` to `final`. An outdated `final` is moved aside first; when another process
    put a current build there meanwhile, that one is kept."""
    if final.exists():
        current = _read_marker(final)
        if current is not None and current.get("builder") == BUILDER_VERSION:
            return
        stale = final.with_name(f".stale-{final.name}-{os.getpid()}")
        os.replace(final, stale)
        shutil.rmtree(stale, ignore_errors=True)
    try:
        os.replace(work, final)
    except OSError:
        # Another build won the race between the check and the rename: keep it if it is current.
        current = _read_marker(final)
        if current is None or current.get("builder") != BUILDER_VERSION:
            raise


def _make_readable(directory: Path) -> None:
    # mkdtemp creates 0700 and safetensors writes 0600: a model is shared by every job.
    directory.chmod(0o755)
    for path in directory.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)


@contextmanager
def _quiet_progress() -> Iterator[None]:
    # `save_pretrained` draws a progress bar per shard; the CLI's output is the catalog JSON.
    enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if enabled:
            hf_logging.enable_progress_bar()


def _read_marker(directory: Path) -> dict[str, Any] | None:
    try:
        marker: dict[str, Any] = json.loads((directory / MARKER).read_text())
    except (OSError, ValueError):
        return None
    return marker


# A randomly initialised output projection gives a nearly uniform next-token distribution, and a
# LoRA adapter cannot change it (the output projection is not adapted). Scaling it up lets a
# fine-tuned adapter make the distribution sharp enough that sampled rollouts (GRPO) follow what
# supervised training taught, as they do with a real model.
OUTPUT_SCALE = 10.0


def _sharpen_output(model: PreTrainedModel) -> None:
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(OUTPUT_SCALE)


# --- the builders: each writes a model into a directory and returns its modality ---------------


def _build_tiny_chat(out: Path) -> str:
    tokenizer = wrap_tokenizer(train_tokenizer(), vision=False)
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=CONTEXT_LENGTH,
        tie_word_embeddings=False,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = _seeded(lambda: Qwen3ForCausalLM(config))
    _sharpen_output(model)
    _save(model, out, tokenizer)
    tokenizer.save_pretrained(out)
    return "text"


def _build_tiny_vision(out: Path) -> str:
    tokenizer = wrap_tokenizer(train_tokenizer(), vision=True)
    image_processor = Gemma3ImageProcessorPil(size={"height": IMAGE_SIZE, "width": IMAGE_SIZE})
    processor = Gemma3Processor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        chat_template=tokenizer.chat_template,
        image_seq_length=IMAGE_TOKENS,
    )
    config = Gemma3Config(
        text_config={
            "vocab_size": len(tokenizer),
            "hidden_size": 64,
            "intermediate_size": 256,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 16,
            "query_pre_attn_scalar": 16,
            "sliding_window": 256,
            "max_position_embeddings": CONTEXT_LENGTH,
            "bos_token_id": tokenizer.bos_token_id,
            "eos_token_id": tokenizer.eos_token_id,
            "pad_token_id": tokenizer.pad_token_id,
        },
        vision_config={
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "image_size": IMAGE_SIZE,
            "patch_size": 8,
            "vision_use_head": False,
        },
        mm_tokens_per_image=IMAGE_TOKENS,
        boi_token_index=_token_id(tokenizer, IMAGE_START),
        eoi_token_index=_token_id(tokenizer, IMAGE_END),
        image_token_index=_token_id(tokenizer, IMAGE_SOFT),
        # Generation reads the special tokens from the top-level config too; Gemma3Config takes
        # them as extra keyword arguments, which its signature does not declare.
        **_special_tokens(tokenizer),
    )
    model = _seeded(lambda: Gemma3ForConditionalGeneration(config))
    _save(model, out, tokenizer)
    processor.save_pretrained(out)
    return "image-text"


def _seeded(make: Callable[[], PreTrainedModel]) -> PreTrainedModel:
    """Initialise a model under a fixed seed without disturbing the caller's random state."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(SEED)
        return make()


def _save(model: PreTrainedModel, out: Path, tokenizer: Any) -> None:
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model.save_pretrained(out)


_BUILDERS: dict[str, Callable[[Path], str]] = {
    "tiny-chat": _build_tiny_chat,
    "tiny-vision": _build_tiny_vision,
}


def _token_id(tokenizer: Any, token: str) -> int:
    ids = tokenizer.convert_tokens_to_ids(token)
    if not isinstance(ids, int):
        raise ValueError(f"{token!r} is not one token of the development tokenizer")
    return ids


def _special_tokens(tokenizer: Any) -> dict[str, Any]:
    return {
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
    }
