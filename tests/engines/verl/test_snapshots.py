"""verl checkpoints as snapshots: training state up and back (same GPU count only), the adapter
exported by the model merger (here the stand-in's, with verl's command line), its modules."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from akka_training.blobstore.local import LocalBlobStore
from akka_training.core.blobkeys import SnapshotKeys, snapshot_keys
from akka_training.engines.verl import snapshots
from tests.engines.verl.conftest import FIXTURES, VerlEnv


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
    keys = snapshot_keys("run-1", 4)
    assert keys == SnapshotKeys(
        "step-4",
        "runs/run-1/snapshots/step-4/",
        "runs/run-1/snapshots/step-4/weights/",
        "runs/run-1/snapshots/step-4/training-state/",
    )
    written = snapshots.save_training_state(blobs, keys.training_state, checkpoint, step=4, gpus=2)
    assert f"{keys.training_state}actor/model_world_size_2_rank_1.pt" in written
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


MERGER_ADAPTER = """
import json, sys, torch
from pathlib import Path
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import Qwen3Config, Qwen3ForCausalLM
from verl.model_merger.base_model_merger import ModelMergerConfig
from verl.model_merger.fsdp_model_merger import FSDPModelMerger

work = Path(sys.argv[1])
torch.manual_seed(0)
config = Qwen3Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                     num_attention_heads=2, num_key_value_heads=1, head_dim=16)
Qwen3ForCausalLM(config).save_pretrained(work / "base")
trained = get_peft_model(Qwen3ForCausalLM.from_pretrained(work / "base"),
                         LoraConfig(r=8, lora_alpha=16, target_modules="all-linear"))
for name, p in trained.named_parameters():
    if "lora_B" in name:
        p.data.normal_()  # as after training: B starts at zero
(work / "actor").mkdir()
(work / "actor" / "lora_train_meta.json").write_text(json.dumps({"r": 8, "lora_alpha": 16, "task_type": "CAUSAL_LM"}))
# What the merger does with the state dict it gathered from the FSDP shards:
merger = object.__new__(FSDPModelMerger)
merger.config = ModelMergerConfig(operation="merge", backend="fsdp", local_dir=str(work / "actor"),
                                  target_dir=str(work / "merged"))
state = {k: v.clone() for k, v in trained.state_dict().items()}
adapter = merger.save_lora_adapter(state)
loaded = PeftModel.from_pretrained(Qwen3ForCausalLM.from_pretrained(work / "base"), adapter)
ids = torch.tensor([[1, 2, 3, 4]])
with torch.no_grad():
    same = torch.allclose(trained(input_ids=ids).logits, loaded(input_ids=ids).logits, atol=1e-5)
print(json.dumps({"adapter": adapter, "same": same}))
"""


@pytest.mark.slow
def test_merger_adapter_loads_with_peft(verl_env: VerlEnv, tmp_path: Path) -> None:
    """verl's merger writes the adapter (``save_lora_adapter``) that PEFT loads back to the same
    model; on a GPU machine the smoke check runs the whole merge from FSDP shards."""
    done = verl_env.run(["-c", MERGER_ADAPTER, str(tmp_path)])
    assert done.returncode == 0, done.stderr[-3000:]
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    adapter = Path(answer["adapter"])
    assert adapter == tmp_path / "merged" / "lora_adapter"
    assert answer["same"]
    modules = snapshots.adapter_modules(adapter)
    assert len(modules) == 2 * 7  # q, k, v, o, gate, up, down in each of two layers
    assert modules[0].startswith("base_model.model.model.layers.0.")
