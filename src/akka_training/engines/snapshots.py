"""Snapshots in the blob store: an adapter (`weights`) and the training state that lets another
attempt (resume) or another run (continue) carry on from the same step.

Layout (`core.blobkeys`) under ``runs/{run}/snapshots/step-{N}/``: ``weights/`` holds the PEFT adapter
(``adapter_config.json``, ``adapter_model.safetensors``); ``training-state/`` holds the
trainer's checkpoint files (optimizer, scheduler, RNG states, ``trainer_state.json`` with the
step and the data position). Everything is uploaded before the snapshot is reported; the report
commits it.
"""

from __future__ import annotations

import fnmatch
import shutil
from pathlib import Path

from akka_training.blobstore import BlobStore
from akka_training.core.blobkeys import SnapshotKeys
from akka_training.core.errors import storage_full
from akka_training.core.reports import SnapshotReport
from akka_training.engines.failures import SourceUnavailable, StorageFull

ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")
# The files of a Hugging Face Trainer checkpoint that make up the training state.
STATE_PATTERNS = (
    "optimizer.pt",
    "scheduler.pt",
    "scaler.pt",
    "trainer_state.json",
    "rng_state*.pth",
)


def upload_snapshot(
    store: BlobStore, keys: SnapshotKeys, step: int, checkpoint: Path
) -> SnapshotReport:
    """Upload the adapter and the training state of a trainer checkpoint directory. A failed
    upload leaves nothing of the snapshot in the store; a full store raises `StorageFull`."""
    weights, state = keys.weights, keys.training_state
    try:
        upload_adapter(store, weights, checkpoint)
        files = [p for p in sorted(checkpoint.iterdir()) if p.is_file() and _is_state(p.name)]
        if not any(p.name == "trainer_state.json" for p in files):
            raise FileNotFoundError(f"{checkpoint} holds no trainer_state.json")
        for path in files:
            store.put_file(state + path.name, path)
    except BaseException as exc:
        for prefix in (weights, state):
            try:
                store.delete(prefix)
            except OSError:
                pass  # the start-up cleanup and the sweeper remove what stays
        full = storage_full(exc)
        if full is not None:
            raise StorageFull(
                f"no space left on the device while saving snapshot {keys.name} to {store.url} "
                f"({full})"
            ) from exc
        raise
    return SnapshotReport(name=keys.name, step=step, weights=weights, training_state=state)


def upload_adapter(store: BlobStore, prefix: str, directory: Path) -> list[str]:
    """Upload the PEFT adapter files of `directory` under `prefix` (which ends with a slash)."""
    keys = []
    for name in ADAPTER_FILES:
        path = directory / name
        if not path.is_file():
            raise FileNotFoundError(f"{directory} holds no {name}")
        try:
            store.put_file(prefix + name, path)
        except OSError as exc:
            full = storage_full(exc)
            if full is None:
                raise
            raise StorageFull(
                f"no space left on the device while saving {prefix}{name} to {store.url} ({full})"
            ) from exc
        keys.append(prefix + name)
    return keys


def download_adapter(store: BlobStore, prefix: str, dest: Path) -> Path:
    """The adapter under `prefix` as a local directory PEFT can load."""
    _fetch(store, prefix, dest, "adapter")
    missing = [n for n in ADAPTER_FILES if not (dest / n).is_file()]
    if missing:
        raise SourceUnavailable(f"the adapter at {prefix} lacks {', '.join(missing)}")
    return dest


def restore_checkpoint(store: BlobStore, weights: str, training_state: str, dest: Path) -> Path:
    """Rebuild a trainer checkpoint directory (adapter plus training state) that the trainer's
    ``resume_from_checkpoint`` takes."""
    if dest.exists():
        shutil.rmtree(dest)
    download_adapter(store, weights, dest)
    _fetch(store, training_state, dest, "training state")
    if not (dest / "trainer_state.json").is_file():
        raise SourceUnavailable(f"the training state at {training_state} lacks trainer_state.json")
    return dest


def _fetch(store: BlobStore, prefix: str, dest: Path, what: str) -> None:
    prefix = prefix.rstrip("/") + "/"
    try:
        if not store.list(prefix):
            raise SourceUnavailable(f"no {what} is stored at {prefix}")
        store.get_dir(prefix, dest)
    except OSError as exc:
        raise SourceUnavailable(f"the {what} at {prefix} could not be read: {exc}") from exc


def _is_state(name: str) -> bool:
    return any(fnmatch.fnmatch(name, pattern) for pattern in STATE_PATTERNS)
