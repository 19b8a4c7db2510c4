"""verl's checkpoints as our snapshots, and back.

A snapshot has two parts:

- ``trainingState``: verl's checkpoint directory ``global_step_N`` as verl wrote it under
  ``trainer.default_local_dir`` (the FSDP shards of the actor with its optimizer and scheduler,
  ``data.pt`` with the data loader's position), plus ``akka-verl.json`` naming the step and
  the GPU count it was saved on;
- ``weights``: the PEFT adapter (``adapter_config.json`` + ``adapter_model.safetensors``),
  exported from the checkpoint by verl's model merger::

      python -m verl.model_merger merge --backend fsdp --local_dir global_step_N/actor \\
          --target_dir DIR            # the adapter lands in DIR/lora_adapter

verl finds a checkpoint through ``latest_checkpointed_iteration.txt``, which it writes after
the checkpoint is complete; `latest_step` reads the same file. FSDP shards are laid out per
rank, so a checkpoint resumes only on the GPU count it was saved on: `restore_training_state`
refuses any other.
"""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
from collections.abc import Mapping
from pathlib import Path

from akka_training.blobstore.base import BlobStore

LATEST_FILE = "latest_checkpointed_iteration.txt"
MANIFEST = "akka-verl.json"
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")


class SnapshotError(Exception):
    """A snapshot that cannot be made or restored; the message says why and what to do."""


class GpuCountMismatch(SnapshotError):
    """A training state saved on another GPU count than the run's."""


def latest_step(checkpoints: Path) -> int | None:
    """The step of verl's latest complete checkpoint, or None."""
    try:
        return int((checkpoints / LATEST_FILE).read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


def new_checkpoints(checkpoints: Path, *, after: int) -> list[int]:
    """Steps of the complete checkpoints later than `after`, in order (a checkpoint is complete
    once verl's latest-iteration file has reached its step)."""
    latest = latest_step(checkpoints)
    if latest is None or latest <= after:
        return []
    steps = [_step_of(p) for p in checkpoints.glob("global_step_*")]
    return sorted(s for s in steps if s is not None and after < s <= latest)


def save_training_state(
    blobs: BlobStore, key: str, checkpoint: Path, *, step: int, gpus: int
) -> list[str]:
    """Upload verl's checkpoint directory with our manifest; returns the keys written."""
    if not checkpoint.is_dir():
        raise SnapshotError(f"verl's checkpoint {checkpoint} does not exist")
    (checkpoint / MANIFEST).write_text(json.dumps({"step": step, "gpus": gpus, "engine": "verl"}))
    return blobs.put_dir(key, checkpoint)


def restore_training_state(
    blobs: BlobStore, key: str, checkpoints: Path, *, step: int, gpus: int
) -> Path:
    """Put a saved checkpoint back where verl resumes from (``resume_mode=auto`` finds it
    through the latest-iteration file). Refuses a checkpoint saved on another GPU count. Later
    checkpoints left by an earlier attempt are removed: the run resumes from `step`."""
    for stale in checkpoints.glob("global_step_*"):
        stale_step = _step_of(stale)
        if stale_step is not None and stale_step > step:
            shutil.rmtree(stale, ignore_errors=True)
    target = checkpoints / f"global_step_{step}"
    if _manifest_gpus(target) == gpus:  # still here from an earlier attempt on this host
        (checkpoints / LATEST_FILE).write_text(str(step))
        return target
    staging = checkpoints / f".restore-{step}"
    shutil.rmtree(staging, ignore_errors=True)
    blobs.get_dir(key, staging)
    manifest_path = staging / MANIFEST
    if not manifest_path.exists():
        shutil.rmtree(staging, ignore_errors=True)
        raise SnapshotError(f"the training state at {key} is not a verl checkpoint")
    saved_gpus = _manifest_gpus(staging)
    if saved_gpus != gpus:
        shutil.rmtree(staging, ignore_errors=True)
        raise GpuCountMismatch(
            f"this snapshot's training state was saved on {saved_gpus} GPU(s), and verl resumes a "
            f"checkpoint only on the GPU count it was saved on: set execution.gpus to "
            f"{saved_gpus}, or branch from the snapshot's weights instead"
        )
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    (checkpoints / LATEST_FILE).write_text(str(step))
    return target


def export_adapter(
    python: Path,
    checkpoint: Path,
    target: Path,
    *,
    env: Mapping[str, str] | None = None,
    log_file: Path | None = None,
    timeout: float = 1800.0,
) -> Path:
    """Export the PEFT adapter of a checkpoint with verl's model merger; returns the adapter
    directory. Raises `SnapshotError` with the merger's last output when it fails."""
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    command = [
        str(python), "-m", "verl.model_merger", "merge", "--backend", "fsdp",
        "--local_dir", str(checkpoint / "actor"), "--target_dir", str(target),
    ]  # fmt: skip
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=timeout, env=dict(env) if env else None
    )
    if log_file is not None:
        with open(log_file, "a", encoding="utf-8") as log:
            log.write(f"$ {' '.join(command)}\n{done.stdout}{done.stderr}")
    adapter = target / "lora_adapter"
    if done.returncode != 0 or not all((adapter / f).exists() for f in ADAPTER_FILES):
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-20:])
        raise SnapshotError(
            f"verl's model merger could not export the adapter of {checkpoint.name} "
            f"(exit {done.returncode}):\n{tail}"
        )
    return adapter


def adapter_modules(adapter: Path) -> list[str]:
    """The modules an adapter covers, read from its safetensors header (no torch needed)."""
    with open(adapter / "adapter_model.safetensors", "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(size))
    modules = {
        name.split(".lora_A.")[0]
        for name in header
        if name != "__metadata__" and ".lora_A." in name
    }
    return sorted(modules)


def save_adapter(blobs: BlobStore, key: str, adapter: Path) -> list[str]:
    """Upload an adapter directory (only the PEFT files and a README, if any)."""
    missing = [f for f in ADAPTER_FILES if not (adapter / f).exists()]
    if missing:
        raise SnapshotError(f"the adapter at {adapter} lacks {', '.join(missing)}")
    return blobs.put_dir(key, adapter)


def fetch_adapter(blobs: BlobStore, key: str, dest: Path) -> Path:
    """Download the adapter a warm start or branch begins from."""
    shutil.rmtree(dest, ignore_errors=True)
    blobs.get_dir(key, dest)
    missing = [f for f in ADAPTER_FILES if not (dest / f).exists()]
    if missing:
        raise SnapshotError(f"the adapter at {key} lacks {', '.join(missing)}")
    return dest


def _manifest_gpus(checkpoint: Path) -> int | None:
    try:
        return int(json.loads((checkpoint / MANIFEST).read_text())["gpus"])
    except (FileNotFoundError, KeyError, ValueError):
        return None


def _step_of(checkpoint: Path) -> int | None:
    number = checkpoint.name.removeprefix("global_step_")
    return int(number) if number.isdigit() else None
