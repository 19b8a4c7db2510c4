"""The merge task: a run's adapter (final, or one snapshot's weights) merged into its base
model with PEFT's `merge_and_unload`, saved as a full model in safetensors with its config,
generation config and tokenizer (the run's own, else the base model's), and uploaded under
the task's output prefix with the size and sha256 of every file.

It runs on the CPUs of a node of the run's pool (the node that holds the base model's files),
in the base model's own precision.
"""

from __future__ import annotations

import hashlib
import socket
from pathlib import Path
from typing import Any

from peft import PeftModel
from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

from akka_training.core.tasks import FileDigest, MergeParams, MergeResult, base_model_unavailable
from akka_training.engines.failures import SourceUnavailable
from akka_training.engines.model_cache import local_model
from akka_training.engines.snapshots import download_adapter
from akka_training.engines.tasks.context import TaskContext, TaskError
from akka_training.engines.tokenizer_files import save_processing


def merge(task: TaskContext) -> dict[str, Any]:
    params = MergeParams.model_validate(task.spec.params)
    base = params.base_model
    base.path = local_model(base.path, task.spec.storage_s3)
    if not (Path(base.path) / "config.json").is_file():
        where = f"node {socket.gethostname()}"
        raise TaskError(base_model_unavailable(base.id, base.path, where, task.spec.run_id))

    task.progress("fetching the adapter")
    try:
        adapter = download_adapter(task.store, params.weights, task.workdir / "adapter")
    except SourceUnavailable as exc:
        raise TaskError(f"the adapter to merge could not be read: {exc}") from exc

    task.progress(f"loading the base model {base.id}")
    model = _load_base(base.path, base.modality)

    task.progress("merging the adapter into the base model")
    merged = PeftModel.from_pretrained(model, str(adapter)).merge_and_unload()

    task.progress("saving the merged model")
    out = task.workdir / "merged"
    merged.save_pretrained(out)
    _save_tokenizer(task, params, out)

    files = digests(out)
    total = sum(f.bytes for f in files)
    done = 0
    for f in files:
        task.progress(f"uploading {f.path}", done, total)
        task.store.put_file(params.output + f.path, out / f.path)
        done += f.bytes
    task.progress("uploaded", done, total)
    return MergeResult(output=params.output, files=files).to_json()


def digests(directory: Path) -> list[FileDigest]:
    """Every file under `directory`, with its size and sha256, in path order."""
    out = []
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                digest.update(chunk)
        out.append(
            FileDigest(
                path=path.relative_to(directory).as_posix(),
                bytes=path.stat().st_size,
                sha256=digest.hexdigest(),
            )
        )
    return out


def _load_base(path: str, modality: str) -> Any:
    loader = AutoModelForImageTextToText if modality == "image-text" else AutoModelForCausalLM
    # The base model's own precision: the merged model is served like the base model is.
    return loader.from_pretrained(path, dtype="auto")


def _save_tokenizer(task: TaskContext, params: MergeParams, out: Path) -> None:
    """The tokenizer files the run trained with, else the base model's."""
    if params.tokenizer and task.store.list(params.tokenizer):
        task.store.get_dir(params.tokenizer, out)
        return
    save_processing(params.base_model, out)
