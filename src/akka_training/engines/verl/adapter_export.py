"""The LoRA weights of one verl checkpoint as a PEFT ``adapter_model.safetensors``, and nothing
else: no merged model, no copy of the base weights.

Run with verl's interpreter (it needs torch; the trainer's never imports it)::

    python -m akka_training.engines.verl.adapter_export ACTOR_DIR OUT_DIR

``ACTOR_DIR`` is ``global_step_N/actor`` as verl's FSDP checkpoint manager writes it: one
``model_world_size_W_rank_R.pt`` per rank (``W`` from ``fsdp_config.json``), each a state dict
whose sharded entries are DTensors. With ``checkpoint.save_lora_only`` those hold the LoRA
weights alone; an older checkpoint of the whole model works too (only the LoRA entries are
read out). Each LoRA tensor's shards are joined along the dimension its placement names; a
replicated entry is taken from rank 0. Keys get PEFT's names (``…q_proj.lora_A.weight``, without
verl's adapter name ``default``). It prints one JSON line: ``{"tensors": N, "bytes": B}``.

``adapter_config.json`` is not written here: the job writes it from the plan
(`snapshots.write_adapter_config`), so the LoRA alpha is the one the run trained with.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

WRAPPER_PREFIXES = ("_fsdp_wrapped_module.", "_checkpoint_wrapped_module.")


def peft_key(key: str) -> str | None:
    """PEFT's name of a LoRA entry of verl's state dict, or None for any other entry."""
    for prefix in WRAPPER_PREFIXES:
        key = key.replace(prefix, "")
    if ".lora_A." not in key and ".lora_B." not in key:
        return None
    return key.replace(".lora_A.default.", ".lora_A.").replace(".lora_B.default.", ".lora_B.")


def export(actor: Path, out: Path) -> dict[str, int]:
    import torch
    from safetensors.torch import save_file

    world_size = int(json.loads((actor / "fsdp_config.json").read_text())["world_size"])
    shards = [
        torch.load(
            actor / f"model_world_size_{world_size}_rank_{rank}.pt",
            map_location="cpu",
            weights_only=False,
        )
        for rank in range(world_size)
    ]
    tensors: dict[str, Any] = {}
    for key in sorted(shards[0]):
        name = peft_key(key)
        if name is not None:
            tensors[name] = _join([shard[key] for shard in shards]).contiguous()
    if not tensors:
        raise SystemExit(f"no LoRA weights in {actor}: was the run trained with a LoRA adapter?")
    out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out / "adapter_model.safetensors"), metadata={"format": "pt"})
    return {
        "tensors": len(tensors),
        "bytes": sum(t.numel() * t.element_size() for t in tensors.values()),
    }


def _join(parts: list[Any]) -> Any:
    """One tensor from its per-rank parts (DTensors, or plain tensors replicated on each rank)."""
    import torch
    from torch.distributed.tensor import DTensor

    first = parts[0]
    if not isinstance(first, DTensor):
        if type(first) is not torch.Tensor and not isinstance(first, torch.nn.Parameter):
            raise SystemExit(f"cannot read a LoRA tensor saved as {type(first).__name__}")
        return first

    mesh = first.device_mesh.mesh
    placements = list(first.placements)
    # The ranks of the first replica group (a 2-D mesh replicates along its first dimension).
    ranks = mesh.flatten().tolist() if mesh.dim() == 1 else mesh[0].flatten().tolist()
    placement: Any = placements[-1]
    if placement.is_shard():
        return torch.cat([parts[r].to_local() for r in ranks], dim=placement.dim)
    if placement.is_replicate():
        return first.to_local()
    raise SystemExit(f"cannot join a tensor placed as {placements}")


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2:
        print("usage: python -m akka_training.engines.verl.adapter_export ACTOR_DIR OUT_DIR")
        return 2
    print(json.dumps(export(Path(args[0]), Path(args[1]))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
