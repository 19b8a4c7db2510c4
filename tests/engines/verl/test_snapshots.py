"""verl checkpoints as snapshots: training state up and back (same GPU count only), the adapter
exported by the model merger (here the stand-in's, with verl's command line), its modules."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from akka_training.blobstore.local import LocalBlobStore
from akka_training.engines.verl import snapshots
from tests.engines.verl.conftest import FIXTURES


def verl_checkpoint(checkpoints: Path, step: int, gpus: int = 2) -> Path:
    actor = checkpoints / f"global_step_{step}" / "actor"
    actor.mkdir(parents=True)
    for rank in range(gpus):
        (actor / f"model_world_size_{gpus}_rank_{rank}.pt").write_bytes(b"shard")
    (actor / "lora_train_meta.json").write_text(json.dumps({"r": 8, "lora_alpha": 16}))
    (checkpoints / f"global_step_{step}" / "data.pt").write_bytes(b"loader")
    (checkpoints / snapshots.LATEST_FILE).write_text(str(step))
    return checkpoints / f"global_step_{step}"


@pytest.fixture
def fake_python(tmp_path: Path) -> Path:
    """An 'interpreter' whose ``-m verl.model_merger`` is the stand-in's."""
    script = tmp_path / "python"
    script.write_text(f'#!/bin/sh\nexec {sys.executable} {FIXTURES / "fake_verl.py"} "$@"\n')
    script.chmod(0o755)
    return script


def test_latest_step_follows_verl_tracker(tmp_path: Path) -> None:
    assert snapshots.latest_step(tmp_path) is None
    verl_checkpoint(tmp_path, 4)
    assert snapshots.latest_step(tmp_path) == 4


def test_training_state_round_trip(tmp_path: Path) -> None:
    blobs = LocalBlobStore(tmp_path / "blobs")
    checkpoint = verl_checkpoint(tmp_path / "a", 4)
    keys = snapshots.snapshot_keys("run-1", 4)
    assert keys == snapshots.SnapshotKeys(
        "step-4",
        "runs/run-1/snapshots/step-4/weights",
        "runs/run-1/snapshots/step-4/training-state",
    )
    written = snapshots.save_training_state(blobs, keys.training_state, checkpoint, step=4, gpus=2)
    assert f"{keys.training_state}/actor/model_world_size_2_rank_1.pt" in written
    restored = snapshots.restore_training_state(
        blobs, keys.training_state, tmp_path / "b", step=4, gpus=2
    )
    assert (restored / "actor" / "model_world_size_2_rank_0.pt").read_bytes() == b"shard"
    assert snapshots.latest_step(tmp_path / "b") == 4


def test_resume_on_another_gpu_count_is_refused(tmp_path: Path) -> None:
    blobs = LocalBlobStore(tmp_path / "blobs")
    snapshots.save_training_state(blobs, "ts", verl_checkpoint(tmp_path / "a", 4), step=4, gpus=2)
    with pytest.raises(
        snapshots.SnapshotError, match=r"saved on 2 GPU\(s\).*set execution\.gpus to 2"
    ):
        snapshots.restore_training_state(blobs, "ts", tmp_path / "b", step=4, gpus=4)
    assert not list((tmp_path / "b").glob("global_step_*"))
    assert snapshots.latest_step(tmp_path / "b") is None


def test_restore_drops_later_checkpoints_and_reuses_a_local_one(tmp_path: Path) -> None:
    blobs = LocalBlobStore(tmp_path / "blobs")
    checkpoints = tmp_path / "ckpt"
    snapshots.save_training_state(blobs, "ts", verl_checkpoint(checkpoints, 4), step=4, gpus=2)
    verl_checkpoint(checkpoints, 6)  # saved by an attempt that died before its snapshot committed
    blobs.delete("ts")  # the local copy is used, not the store's
    snapshots.restore_training_state(blobs, "ts", checkpoints, step=4, gpus=2)
    assert sorted(p.name for p in checkpoints.glob("global_step_*")) == ["global_step_4"]
    assert snapshots.latest_step(checkpoints) == 4


def test_adapter_export_with_the_model_merger(tmp_path: Path, fake_python: Path) -> None:
    checkpoint = verl_checkpoint(tmp_path / "ckpt", 2)
    adapter = snapshots.export_adapter(
        fake_python, checkpoint, tmp_path / "export", log_file=tmp_path / "log"
    )
    assert adapter == tmp_path / "export" / "lora_adapter"
    assert json.loads((adapter / "adapter_config.json").read_text())["r"] == 8
    assert snapshots.adapter_modules(adapter) == [
        f"base_model.model.model.layers.{i}.self_attn.{p}"
        for i in range(2)
        for p in ("q_proj", "v_proj")
    ]
    assert "-m verl.model_merger merge --backend fsdp --local_dir" in (tmp_path / "log").read_text()
    blobs = LocalBlobStore(tmp_path / "blobs")
    snapshots.save_adapter(blobs, "w", adapter)
    fetched = snapshots.fetch_adapter(blobs, "w", tmp_path / "source")
    assert (fetched / "adapter_model.safetensors").read_bytes() == (
        adapter / "adapter_model.safetensors"
    ).read_bytes()


def test_failed_export_says_why(tmp_path: Path, fake_python: Path) -> None:
    checkpoint = tmp_path / "ckpt" / "global_step_2"
    (checkpoint / "actor").mkdir(parents=True)  # no lora_train_meta.json: the merger fails
    with pytest.raises(
        snapshots.SnapshotError, match="could not export the adapter of global_step_2"
    ):
        snapshots.export_adapter(fake_python, checkpoint, tmp_path / "export")


def test_fetching_a_missing_adapter_fails(tmp_path: Path) -> None:
    with pytest.raises(snapshots.SnapshotError, match=r"lacks adapter_config\.json"):
        snapshots.fetch_adapter(LocalBlobStore(tmp_path / "blobs"), "nothing", tmp_path / "source")


def test_fake_interpreter_is_wired(fake_python: Path) -> None:
    assert subprocess.run([str(fake_python), "-m", "nothing"], capture_output=True).returncode == 1
