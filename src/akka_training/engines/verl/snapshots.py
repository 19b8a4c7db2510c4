"""verl's checkpoints as our snapshots, and back.

A snapshot has two parts:

- ``trainingState``: verl's checkpoint directory ``global_step_N`` as verl wrote it under
  ``trainer.default_local_dir``: the actor's FSDP shards, LoRA weights only
  (``checkpoint.save_lora_only``; a resume loads the base model from its path), with the
  optimizer and scheduler, ``data.pt`` with the data loader's position, plus ``akka-verl.json``
  naming the step, the GPU count it was saved on, the key it was stored under and the size of
  every file;
- ``weights``: the PEFT adapter (``adapter_config.json`` + ``adapter_model.safetensors``): the
  LoRA tensors read out of the shards in verl's environment (`adapter_export`, no merged model)
  and a config the job writes from the plan (`write_adapter_config`: verl's own merger would
  truncate the LoRA alpha to an integer).

verl finds a checkpoint through ``latest_checkpointed_iteration.txt``, which it writes after
the checkpoint is complete; `latest_step` reads the same file. verl's own rotation is off
(``trainer.max_actor_ckpt_to_keep=null``): the job removes older checkpoints itself once a
later snapshot is in the store (`rotate`), so a checkpoint never vanishes while it is exported
or uploaded, and the newest stays on the node for a resume there (`restore_training_state`
reuses it when it matches the snapshot's manifest). FSDP shards are laid out per rank, so a
checkpoint resumes only on the GPU count it was saved on: `restore_training_state` refuses any
other.
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
EXPORT_MODULE = "akka_training.engines.verl.adapter_export"


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
    blobs: BlobStore,
    key: str,
    checkpoint: Path,
    *,
    step: int,
    gpus: int,
    schedule_steps: int | None = None,
) -> int:
    """Upload verl's checkpoint directory with our manifest; returns the bytes uploaded. The
    manifest records `schedule_steps`, the steps the learning-rate schedule spans, which verl's
    checkpoint does not hold (its scheduler's state is the step only)."""
    if not checkpoint.is_dir():
        raise SnapshotError(f"verl's checkpoint {checkpoint} does not exist")
    (checkpoint / MANIFEST).unlink(missing_ok=True)
    files = _file_sizes(checkpoint)
    blobs.put_dir(key, checkpoint)
    # The manifest last: a training state in the store without it is an incomplete one.
    manifest: dict[str, object] = {
        "step": step,
        "gpus": gpus,
        "engine": "verl",
        "key": key,
        "files": files,
    }
    if schedule_steps is not None:
        manifest["scheduleSteps"] = schedule_steps
    (checkpoint / MANIFEST).write_text(json.dumps(manifest, sort_keys=True))
    blobs.put_file(f"{key.rstrip('/')}/{MANIFEST}", checkpoint / MANIFEST)
    return sum(files.values()) + (checkpoint / MANIFEST).stat().st_size


def restore_training_state(
    blobs: BlobStore, key: str, checkpoints: Path, *, step: int, gpus: int
) -> Path:
    """Put a saved checkpoint back where verl resumes from (``resume_mode=auto`` finds it
    through the latest-iteration file). A checkpoint of the step still on this node is used as
    it is when it matches the stored manifest file for file; otherwise the store's copy is
    downloaded. Refuses a checkpoint saved on another GPU count. Later checkpoints left by an
    earlier attempt are removed: the run resumes from `step`."""
    for stale in checkpoints.glob("global_step_*"):
        stale_step = _step_of(stale)
        if stale_step is not None and stale_step > step:
            shutil.rmtree(stale, ignore_errors=True)
    target = checkpoints / f"global_step_{step}"
    if local_copy_matches(blobs, key, target):
        saved_gpus = _manifest_gpus(target)
        if saved_gpus != gpus:
            raise _gpu_mismatch(saved_gpus)
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
        raise _gpu_mismatch(saved_gpus)
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    (checkpoints / LATEST_FILE).write_text(str(step))
    return target


def local_copy_matches(blobs: BlobStore, key: str, checkpoint: Path) -> bool:
    """Whether `checkpoint` on this node is the training state stored at `key`: the same
    manifest (step, GPU count, key, and every file with its size), and those files present."""
    try:
        local: dict[str, object] = json.loads((checkpoint / MANIFEST).read_text())
        stored: dict[str, object] = json.loads(blobs.get_bytes(key.rstrip("/") + "/" + MANIFEST))
    except (OSError, ValueError, KeyError):
        return False
    if local != stored or not isinstance(local.get("files"), dict):
        return False
    return _file_sizes(checkpoint) == local["files"]


def rotate(checkpoints: Path, *, keep: int) -> list[int]:
    """Remove the checkpoints older than step `keep` (whose snapshot is in the store); later
    ones, which verl may still be writing or the job not yet stored, stay. Returns the steps
    removed."""
    removed = []
    for checkpoint in checkpoints.glob("global_step_*"):
        step = _step_of(checkpoint)
        if step is not None and step < keep:
            shutil.rmtree(checkpoint, ignore_errors=True)
            removed.append(step)
    return sorted(removed)


def export_adapter(
    python: Path,
    checkpoint: Path,
    target: Path,
    *,
    alpha: float,
    base_model: str,
    exclude_modules: str | None = None,
    env: Mapping[str, str] | None = None,
    log_file: Path | None = None,
    timeout: float = 1800.0,
) -> Path:
    """Export the PEFT adapter of a checkpoint into `target` (`adapter_export` in verl's
    environment, then `write_adapter_config`); returns `target`. Raises `SnapshotError` with
    the exporter's last output when it fails."""
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    command = [str(python), "-m", EXPORT_MODULE, str(checkpoint / "actor"), str(target)]
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=timeout, env=dict(env) if env else None
    )
    if log_file is not None:
        with open(log_file, "a", encoding="utf-8") as log:
            log.write(f"$ {' '.join(command)}\n{done.stdout}{done.stderr}")
    if done.returncode != 0 or not (target / ADAPTER_FILES[1]).exists():
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-20:])
        raise SnapshotError(
            f"the adapter of {checkpoint.name} could not be exported (exit {done.returncode}):\n"
            f"{tail}"
        )
    write_adapter_config(
        target, alpha=alpha, base_model=base_model, exclude_modules=exclude_modules
    )
    return target


def write_adapter_config(
    adapter: Path, *, alpha: float, base_model: str, exclude_modules: str | None = None
) -> dict[str, object]:
    """PEFT's ``adapter_config.json`` for the tensors in `adapter`: the rank and the modules
    read from the tensors, the alpha as the plan gave it (never truncated)."""
    shapes = _tensor_shapes(adapter / ADAPTER_FILES[1])
    ranks = {shape[0] for name, shape in shapes.items() if ".lora_A." in name}
    if len(ranks) != 1:
        raise SnapshotError(f"the adapter at {adapter} has LoRA ranks {sorted(ranks)}, not one")
    config: dict[str, object] = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": base_model,
        "r": ranks.pop(),
        "lora_alpha": int(alpha) if float(alpha).is_integer() else alpha,
        "lora_dropout": 0.0,
        "bias": "none",
        "target_modules": sorted({m.rsplit(".", 1)[-1] for m in _modules(shapes)}),
        "exclude_modules": exclude_modules,
        "fan_in_fan_out": False,
        "use_rslora": False,
        "use_dora": False,
        "inference_mode": True,
    }
    (adapter / ADAPTER_FILES[0]).write_text(json.dumps(config, indent=2))
    return config


def adapter_modules(adapter: Path) -> list[str]:
    """The modules an adapter covers, read from its safetensors header (no torch needed)."""
    return _modules(_tensor_shapes(adapter / ADAPTER_FILES[1]))


def directory_bytes(directory: Path) -> int:
    return sum(_file_sizes(directory).values())


def _tensor_shapes(path: Path) -> dict[str, list[int]]:
    with open(path, "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(size))
    return {name: info["shape"] for name, info in header.items() if name != "__metadata__"}


def _modules(shapes: Mapping[str, object]) -> list[str]:
    return sorted({name.split(".lora_A.")[0] for name in shapes if ".lora_A." in name})


def _file_sizes(directory: Path) -> dict[str, int]:
    return {
        str(p.relative_to(directory)): p.stat().st_size
        for p in sorted(directory.rglob("*"))
        if p.is_file() and p.name != MANIFEST
    }


def _gpu_mismatch(saved_gpus: int | None) -> GpuCountMismatch:
    return GpuCountMismatch(
        f"this snapshot's training state was saved on {saved_gpus} GPU(s), and verl resumes a "
        f"checkpoint only on the GPU count it was saved on: set execution.gpus to "
        f"{saved_gpus}, or branch from the snapshot's weights instead"
    )


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


def saved_schedule_steps(checkpoint: Path) -> int | None:
    """The steps the learning-rate schedule of a restored checkpoint spans (None: a snapshot
    saved before the manifest recorded them)."""
    try:
        return int(json.loads((checkpoint / MANIFEST).read_text())["scheduleSteps"])
    except (FileNotFoundError, KeyError, ValueError, TypeError):
        return None


def _manifest_gpus(checkpoint: Path) -> int | None:
    try:
        return int(json.loads((checkpoint / MANIFEST).read_text())["gpus"])
    except (FileNotFoundError, KeyError, ValueError):
        return None


def _step_of(checkpoint: Path) -> int | None:
    number = checkpoint.name.removeprefix("global_step_")
    return int(number) if number.isdigit() else None
