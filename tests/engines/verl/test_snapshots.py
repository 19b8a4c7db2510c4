"""verl checkpoints as snapshots: training state up and back (same GPU count only), the adapter
exported by the model merger (here the stand-in's, with verl's command line), its modules."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from akka_training.blobstore.local import LocalBlobStore
from akka_training.core.blobkeys import SnapshotKeys, snapshot_keys
from akka_training.engines.verl import snapshots
from tests.engines.verl.conftest import FIXTURES, VerlEnv


class CountingStore(LocalBlobStore):
    """A local store that records the prefixes downloaded with get_dir."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.downloads: list[str] = []

    def get_dir(self, prefix: str, directory: Path) -> Path:
        self.downloads.append(prefix)
        return super().get_dir(prefix, directory)


def verl_checkpoint(
    checkpoints: Path, step: int, gpus: int = 2, rank: int = 8, *, tensors: bool = False
) -> Path:
    """A checkpoint laid out as verl's FSDP manager writes it; with `tensors`, its shards hold
    LoRA weights as with save_lora_only (the stand-in's), otherwise a few bytes each."""
    actor = checkpoints / f"global_step_{step}" / "actor"
    actor.mkdir(parents=True)
    for r in range(gpus):
        (actor / f"model_world_size_{gpus}_rank_{r}.pt").write_bytes(b"shard %d" % r)
    if tensors:
        import torch

        from tests.engines.verl.fixtures.fake_verl import lora_state

        state = lora_state(step, rank, lora_only=True)
        for r in range(gpus):
            torch.save(state, actor / f"model_world_size_{gpus}_rank_{r}.pt")
    (actor / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 1, "world_size": gpus}))
    (actor / "lora_train_meta.json").write_text(json.dumps({"r": rank, "lora_alpha": 16}))
    (checkpoints / f"global_step_{step}" / "data.pt").write_bytes(b"loader")
    (checkpoints / snapshots.LATEST_FILE).write_text(str(step))
    return checkpoints / f"global_step_{step}"


@pytest.fixture
def fake_python(tmp_path: Path) -> Path:
    """An 'interpreter' that runs the stand-in (and through it the real exporter)."""
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
    size = snapshots.save_training_state(blobs, keys.training_state, checkpoint, step=4, gpus=2)
    assert blobs.exists(f"{keys.training_state}actor/model_world_size_2_rank_1.pt")
    assert size == sum(p.stat().st_size for p in checkpoint.rglob("*") if p.is_file())
    restored = snapshots.restore_training_state(
        blobs, keys.training_state, tmp_path / "b", step=4, gpus=2
    )
    shard = "actor/model_world_size_2_rank_0.pt"
    assert (restored / shard).read_bytes() == (checkpoint / shard).read_bytes()
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
    blobs = CountingStore(tmp_path / "blobs")
    checkpoints = tmp_path / "ckpt"
    snapshots.save_training_state(blobs, "ts", verl_checkpoint(checkpoints, 4), step=4, gpus=2)
    verl_checkpoint(checkpoints, 6)  # saved by an attempt that died before its snapshot committed
    snapshots.restore_training_state(blobs, "ts", checkpoints, step=4, gpus=2)
    assert sorted(p.name for p in checkpoints.glob("global_step_*")) == ["global_step_4"]
    assert snapshots.latest_step(checkpoints) == 4
    assert blobs.downloads == []  # the local copy matches the stored one, file for file


def test_a_local_checkpoint_that_differs_from_the_snapshot_is_downloaded_again(
    tmp_path: Path,
) -> None:
    blobs = CountingStore(tmp_path / "blobs")
    checkpoints = tmp_path / "ckpt"
    checkpoint = verl_checkpoint(checkpoints, 4)
    snapshots.save_training_state(blobs, "ts", checkpoint, step=4, gpus=2)
    shard = checkpoint / "actor" / "model_world_size_2_rank_1.pt"
    stored = shard.read_bytes()
    shard.write_bytes(b"cut short")  # a copy that is not the snapshot's
    snapshots.restore_training_state(blobs, "ts", checkpoints, step=4, gpus=2)
    assert blobs.downloads == ["ts"]
    assert shard.read_bytes() == stored
    # and a checkpoint of the same step from another snapshot (another key) is not taken
    snapshots.save_training_state(
        blobs, "other", verl_checkpoint(tmp_path / "o", 4), step=4, gpus=2
    )
    snapshots.restore_training_state(blobs, "other", checkpoints, step=4, gpus=2)
    assert blobs.downloads == ["ts", "other"]


def test_rotation_keeps_the_stored_checkpoint_and_later_ones(tmp_path: Path) -> None:
    for step in (2, 4, 6, 8):
        verl_checkpoint(tmp_path, step)
    assert snapshots.rotate(tmp_path, keep=6) == [2, 4]
    assert sorted(p.name for p in tmp_path.glob("global_step_*")) == [
        "global_step_6",
        "global_step_8",
    ]


@pytest.mark.slow
def test_adapter_export_reads_the_lora_weights_and_writes_the_plans_alpha(
    tmp_path: Path, fake_python: Path
) -> None:
    import torch
    from safetensors.torch import load_file

    checkpoint = verl_checkpoint(tmp_path / "ckpt", 2, rank=4, tensors=True)
    adapter = snapshots.export_adapter(
        fake_python,
        checkpoint,
        tmp_path / "export",
        alpha=24,
        base_model="/models/tiny-chat",
        log_file=tmp_path / "log",
    )
    assert adapter == tmp_path / "export"
    assert sorted(p.name for p in adapter.iterdir()) == [
        "adapter_config.json",
        "adapter_model.safetensors",
    ]  # the adapter alone: no merged model beside it
    config = json.loads((adapter / "adapter_config.json").read_text())
    assert (config["r"], config["lora_alpha"], config["peft_type"]) == (4, 24, "LORA")
    assert config["target_modules"] == ["q_proj", "v_proj"]
    assert snapshots.adapter_modules(adapter) == [
        f"base_model.model.model.layers.{i}.self_attn.{p}"
        for i in range(2)
        for p in ("q_proj", "v_proj")
    ]
    tensors = load_file(str(adapter / "adapter_model.safetensors"))
    shard = torch.load(checkpoint / "actor" / "model_world_size_2_rank_0.pt")
    key = "base_model.model.model.layers.1.self_attn.v_proj.lora_B"
    assert torch.equal(tensors[f"{key}.weight"], shard[f"{key}.default.weight"])
    assert "-m akka_training.engines.verl.adapter_export" in (tmp_path / "log").read_text()
    blobs = LocalBlobStore(tmp_path / "blobs")
    snapshots.save_adapter(blobs, "w", adapter)
    fetched = snapshots.fetch_adapter(blobs, "w", tmp_path / "source")
    assert (fetched / "adapter_model.safetensors").read_bytes() == (
        adapter / "adapter_model.safetensors"
    ).read_bytes()


def test_a_fractional_alpha_is_written_as_it_is(tmp_path: Path) -> None:
    import numpy as np
    from safetensors.numpy import save_file

    save_file(
        {
            "m.q_proj.lora_A.weight": np.zeros((8, 4), dtype=np.float32),
            "m.q_proj.lora_B.weight": np.zeros((4, 8), dtype=np.float32),
        },
        str(tmp_path / "adapter_model.safetensors"),
    )
    config = snapshots.write_adapter_config(tmp_path, alpha=0.5, base_model="b")
    assert config["lora_alpha"] == 0.5
    assert json.loads((tmp_path / "adapter_config.json").read_text())["lora_alpha"] == 0.5


@pytest.mark.slow
def test_failed_export_says_why(tmp_path: Path, fake_python: Path) -> None:
    checkpoint = tmp_path / "ckpt" / "global_step_2"
    (checkpoint / "actor").mkdir(parents=True)  # no shards: nothing to export
    with pytest.raises(
        snapshots.SnapshotError, match="the adapter of global_step_2 could not be exported"
    ):
        snapshots.export_adapter(
            fake_python, checkpoint, tmp_path / "export", alpha=16, base_model="b"
        )


def test_fetching_a_missing_adapter_fails(tmp_path: Path) -> None:
    with pytest.raises(snapshots.SnapshotError, match=r"lacks adapter_config\.json"):
        snapshots.fetch_adapter(LocalBlobStore(tmp_path / "blobs"), "nothing", tmp_path / "source")


def test_fake_interpreter_is_wired(fake_python: Path) -> None:
    assert subprocess.run([str(fake_python), "-m", "nothing"], capture_output=True).returncode == 1


SHARDS = """
import json, os, socket, sys, torch
import torch.distributed as dist
import torch.multiprocessing as mp
from pathlib import Path
from peft import LoraConfig, get_peft_model
from transformers import Qwen3Config, Qwen3ForCausalLM

def trained(work):
    torch.manual_seed(1)
    model = get_peft_model(Qwen3ForCausalLM.from_pretrained(work / "base"),
                           LoraConfig(r=8, lora_alpha=24, target_modules="all-linear"))
    for name, p in model.named_parameters():
        if "lora_B" in name:
            p.data.normal_()  # as after training: B starts at zero
    return model

def rank_main(rank, work, port):
    # What verl's FSDP checkpoint manager saves on each of two ranks: the LoRA entries of the
    # sharded state dict, DTensors split along their first dimension.
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor
    mesh = init_device_mesh("cpu", (2,), mesh_dim_names=("fsdp",))
    state = {k: distribute_tensor(v.detach().clone(), mesh, [Shard(0)])
             for k, v in trained(work).state_dict().items() if "lora_" in k}
    torch.save(state, work / "actor" / f"model_world_size_2_rank_{rank}.pt")
    dist.destroy_process_group()

if __name__ == "__main__":
    work = Path(sys.argv[1])
    torch.manual_seed(0)
    config = Qwen3Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=16)
    Qwen3ForCausalLM(config).save_pretrained(work / "base")
    (work / "actor").mkdir()
    (work / "actor" / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 2, "world_size": 2}))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(rank_main, args=(work, port), nprocs=2)
    with torch.no_grad():
        logits = trained(work)(input_ids=torch.tensor([[1, 2, 3, 4]])).logits
    torch.save(logits, work / "trained-logits.pt")
"""

PEFT_LOAD = """
import json, sys, torch
from pathlib import Path
from peft import PeftModel
from transformers import Qwen3ForCausalLM
work, adapter = Path(sys.argv[1]), sys.argv[2]
loaded = PeftModel.from_pretrained(Qwen3ForCausalLM.from_pretrained(work / "base"), adapter)
with torch.no_grad():
    logits = loaded(input_ids=torch.tensor([[1, 2, 3, 4]])).logits
trained = torch.load(work / "trained-logits.pt")
print(json.dumps({"same": torch.allclose(trained, logits, atol=1e-5),
                  "scaling": loaded.base_model.model.model.layers[0].self_attn.q_proj.scaling}))
"""


@pytest.mark.slow
def test_exported_adapter_from_sharded_checkpoint_loads_with_peft(
    verl_env: VerlEnv, tmp_path: Path
) -> None:
    """In verl's environment: a checkpoint sharded over two ranks (DTensors, as verl's FSDP
    manager saves it with save_lora_only) exports to an adapter PEFT loads back to the very
    model that was trained, with the alpha the plan gave (24, LoRA scaling 24 / 8)."""
    shards = tmp_path / "shards.py"
    shards.write_text(SHARDS)
    done = verl_env.run([str(shards), str(tmp_path)], timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    checkpoint = tmp_path / "global_step_3"
    checkpoint.mkdir()
    (tmp_path / "actor").rename(checkpoint / "actor")
    adapter = snapshots.export_adapter(
        verl_env.python,
        checkpoint,
        tmp_path / "adapter",
        alpha=24,
        base_model=str(tmp_path / "base"),
        env={**os.environ, "PYTHONPATH": str(verl_env.pylib)},
    )
    assert len(snapshots.adapter_modules(adapter)) == 2 * 7  # every linear layer of two layers
    loaded = verl_env.run(["-c", PEFT_LOAD, str(tmp_path), str(adapter)])
    assert loaded.returncode == 0, loaded.stderr[-3000:]
    answer = json.loads(loaded.stdout.strip().splitlines()[-1])
    assert answer == {"same": True, "scaling": {"default": 3.0}}


def test_a_training_state_keeps_the_steps_its_schedule_spans(tmp_path: Path) -> None:
    # verl's scheduler state is the step alone: the manifest carries the schedule's length, so
    # that a continuation warms up as its source did.
    blobs = LocalBlobStore(tmp_path / "blobs")
    checkpoint = verl_checkpoint(tmp_path / "a", 4)
    snapshots.save_training_state(blobs, "ts", checkpoint, step=4, gpus=2, schedule_steps=50)
    restored = snapshots.restore_training_state(blobs, "ts", tmp_path / "b", step=4, gpus=2)
    assert snapshots.saved_schedule_steps(restored) == 50
    # one saved before the manifest recorded it
    snapshots.save_training_state(blobs, "old", verl_checkpoint(tmp_path / "c", 4), step=4, gpus=2)
    restored = snapshots.restore_training_state(blobs, "old", tmp_path / "d", step=4, gpus=2)
    assert snapshots.saved_schedule_steps(restored) is None
