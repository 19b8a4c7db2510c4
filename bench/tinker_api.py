"""The Tinker API's cost: a ``forward_backward`` + ``optim_step`` pair through the `tinker` SDK
and a live trainer, against the same pair in-process on the same model (the job's own
`LoraModel`, the same LoRA, data and Adam settings), on this machine. For each model (the tiny
development model, and a ~100M-parameter Qwen3 of random weights built once under
``.cache/bench-models``) it prints the median time of a pair:

- in-process (`LoraModel.forward_backward` then `optim_step`, nothing else), measured before
  and after the SDK's pairs;
- through the SDK, one pair at a time (both submitted, both waited for, then the next pair);
- through the SDK, pipelined (every pair submitted before the first is waited for), as the
  total time over the number of pairs;

then the ratio of each SDK figure to in-process, and the goal: pipelined, the API adds at most
10% on the larger model. And whether pipelined futures keep the device busy: the job's own
time in the pairs (each ``optim_step``'s ``step_seconds``, from its step's first
``forward_backward`` to its end) over the wall time of the pipelined pairs; the device waits
only where the next request was not queued before the previous one ended. Goal: busy >= 95%.

    python bench/tinker_api.py [--pairs 8] [--warmup 2] [--batch 8] [--length 64] [--tiny-only]
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from akka_training.testing.service import TrainerProcess

REPO = Path(__file__).resolve().parents[1]
DEV_MODELS = REPO / ".cache" / "devmodels"
BENCH_MODELS = REPO / ".cache" / "bench-models"
LARGE = "bench-100m"
RANK = 16
GOAL_RATIO = 1.10
GOAL_BUSY = 0.95
ADAM = {"learning_rate": 1e-4, "weight_decay": 0.0, "grad_clip_norm": 1.0}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=8, help="Timed pairs of each kind.")
    parser.add_argument("--warmup", type=int, default=2, help="Untimed pairs first.")
    parser.add_argument("--batch", type=int, default=8, help="Sequences a forward_backward.")
    parser.add_argument("--length", type=int, default=64, help="Tokens a sequence.")
    parser.add_argument("--tiny-only", action="store_true", help="Skip the ~100M model.")
    args = parser.parse_args()
    # The SDK logs a warning each time it is told to try again.
    logging.getLogger("tinker").setLevel(logging.ERROR)
    subprocess.run(
        [sys.executable, "-m", "akka_training.devmodels", "build", str(DEV_MODELS)],
        check=True,
        capture_output=True,
    )
    models = {"tiny-chat": DEV_MODELS / "tiny-chat"}
    if not args.tiny_only:
        models[LARGE] = build_large(BENCH_MODELS / LARGE, DEV_MODELS / "tiny-chat")
    tokens = sequences(args.batch, args.length, vocab=len(tokenizer_of(models["tiny-chat"])))
    print(f"load average before: {os.getloadavg()}", flush=True)
    results = {}
    for name, path in models.items():
        # In-process before and after the SDK's pairs, so that a change in the host's load
        # falls on both sides.
        print(f"{name} ({parameters(path) / 1e6:.1f}M parameters): in-process ...", flush=True)
        local = in_process(path, tokens, args.warmup, args.pairs)
        gc.collect()
        print(f"{name}: through the SDK ...", flush=True)
        sdk = through_sdk(name, models, tokens, args.warmup, args.pairs)
        print(f"{name}: in-process again ...", flush=True)
        local += in_process(path, tokens, args.warmup, args.pairs)
        gc.collect()
        results[name] = (local, sdk)
    print(f"load average after: {os.getloadavg()} on {os.cpu_count()} cores", flush=True)
    report(results, args)


# --- the models -----------------------------------------------------------------------------------


def build_large(dest: Path, tokenizer_from: Path) -> Path:
    """A Qwen3 of random (seeded) weights with about 100M parameters and the development
    tokenizer, in the Hugging Face layout; built once."""
    if (dest / "model.safetensors").is_file():
        return dest
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    vocab = len(tokenizer_of(tokenizer_from))
    config = Qwen3Config(
        vocab_size=vocab,
        hidden_size=768,
        intermediate_size=3072,
        num_hidden_layers=12,
        num_attention_heads=12,
        num_key_value_heads=4,
        head_dim=64,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        bos_token_id=1,
        eos_token_id=3,
        pad_token_id=0,
    )
    building = Path(tempfile.mkdtemp(dir=dest.parent if dest.parent.exists() else None))
    Qwen3ForCausalLM(config).save_pretrained(str(building))
    for file in tokenizer_from.iterdir():
        if file.name.startswith(("tokenizer", "chat_template")):
            shutil.copy(file, building / file.name)
    dest.parent.mkdir(parents=True, exist_ok=True)
    building.rename(dest)
    return dest


def tokenizer_of(path: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path))


def parameters(path: Path) -> int:
    from safetensors import safe_open

    with safe_open(str(path / "model.safetensors"), "pt") as f:
        return sum(int(np.prod(f.get_slice(k).get_shape())) for k in f.keys())  # noqa: SIM118


def sequences(batch: int, length: int, vocab: int) -> list[list[int]]:
    rng = np.random.default_rng(0)
    return [rng.integers(4, vocab, size=length + 1).tolist() for _ in range(batch)]


# --- in-process -----------------------------------------------------------------------------------


def in_process(path: Path, tokens: list[list[int]], warmup: int, pairs: int) -> list[float]:
    from akka_training.core.interactive import InteractiveLora
    from akka_training.engines.tinker.model import AdamParams, LoraModel
    from akka_training.engines.tinker.wire import Datum, ForwardBackward

    model = LoraModel(str(path), InteractiveLora(rank=RANK, seed=0))
    data = [
        Datum(
            tokens=t[:-1],
            inputs={
                "target_tokens": np.array(t[1:], dtype=np.int64),
                "weights": np.ones(len(t) - 1, dtype=np.float32),
            },
        )
        for t in tokens
    ]
    adam = AdamParams(**ADAM)
    times = []
    for i in range(warmup + pairs):
        request = ForwardBackward("local", i + 1, "cross_entropy", False, {}, data)
        started = time.perf_counter()
        model.forward_backward(request)
        model.optim_step(adam)
        if i >= warmup:
            times.append(time.perf_counter() - started)
    return times


# --- through the SDK ------------------------------------------------------------------------------


def through_sdk(
    name: str, models: dict[str, Path], tokens: list[list[int]], warmup: int, pairs: int
) -> dict[str, Any]:
    import tinker
    from tinker import types

    catalog = [{"id": model, "path": str(path)} for model, path in models.items()]
    with tempfile.TemporaryDirectory() as tmp:
        # A deployment's defaults otherwise: what a user's session costs.
        trainer = TrainerProcess(Path(tmp), {"trainer": {"catalog": catalog}}).start()
        try:
            trainer.cli("training", "projects", "create", "bench")
            created = trainer.cli_json("auth", "tokens", "create", "bench", "--project", "bench")
            service = tinker.ServiceClient(
                base_url=f"{trainer.url}/tinker", api_key="tml-" + str(created["token"])
            )
            training = service.create_lora_training_client(
                base_model=name, rank=RANK, seed=0
            ).result()
            data = [
                types.Datum(
                    model_input=types.ModelInput.from_ints(t[:-1]),
                    loss_fn_inputs={
                        "target_tokens": types.TensorData.from_numpy(np.array(t[1:])),
                        "weights": types.TensorData.from_numpy(
                            np.ones(len(t) - 1, dtype=np.float32)
                        ),
                    },
                )
                for t in tokens
            ]
            adam = types.AdamParams(**ADAM)

            def pair() -> tuple[Any, Any]:
                return (
                    training.forward_backward(data, "cross_entropy"),
                    training.optim_step(adam),
                )

            for _ in range(warmup):
                for future in pair():
                    future.result()
            one_at_a_time = []
            for _ in range(pairs):
                started = time.perf_counter()
                for future in pair():
                    future.result()
                one_at_a_time.append(time.perf_counter() - started)
            started = time.perf_counter()
            futures = [pair() for _ in range(pairs)]
            steps = []
            for fwd, opt in futures:
                fwd.result()
                steps.append(opt.result().metrics)
            pipelined = time.perf_counter() - started
            service.close("success").result()
        finally:
            trainer.close()
    busy = sum(float(m["step_seconds"]) for m in steps)
    return {"one_at_a_time": one_at_a_time, "pipelined": pipelined / pairs, "busy": busy}


# --- the report -----------------------------------------------------------------------------------


def report(results: dict[str, tuple[list[float], dict[str, Any]]], args: Any) -> None:
    print(
        f"\nA forward_backward + optim_step pair: {args.batch} sequences of {args.length} "
        f"tokens, LoRA rank {RANK}, {args.pairs} timed pairs after {args.warmup} untimed "
        "(medians; pipelined: total over pairs)."
    )
    header = (
        f"{'model':<12} {'in-process':>11} {'SDK 1-by-1':>11} {'ratio':>6} "
        f"{'SDK piped':>10} {'ratio':>6} {'device busy':>12}"
    )
    print(header)
    lines = {}
    for name, (local, sdk) in results.items():
        base = statistics.median(local)
        single = statistics.median(sdk["one_at_a_time"])
        piped = sdk["pipelined"]
        busy = sdk["busy"] / (piped * args.pairs)
        lines[name] = {
            "in_process_s": base,
            "sdk_one_at_a_time_s": single,
            "sdk_pipelined_s": piped,
            "ratio_one_at_a_time": single / base,
            "ratio_pipelined": piped / base,
            "device_busy": busy,
        }
        print(
            f"{name:<12} {base:>10.4f}s {single:>10.4f}s {single / base:>6.2f} "
            f"{piped:>9.4f}s {piped / base:>6.2f} {busy:>11.0%}"
        )
    goal_model = LARGE if LARGE in lines else "tiny-chat"
    ratio = lines[goal_model]["ratio_pipelined"]
    busy = lines[goal_model]["device_busy"]
    print(
        f"goal: pipelined, the API adds at most {GOAL_RATIO - 1:.0%} on {goal_model}: "
        f"{ratio:.2f} ({'met' if ratio <= GOAL_RATIO else 'not met'})"
    )
    print(
        f"goal: pipelined futures keep the device busy (>= {GOAL_BUSY:.0%}) on {goal_model}: "
        f"{busy:.0%} ({'met' if busy >= GOAL_BUSY else 'not met'})"
    )
    print(json.dumps(lines))


if __name__ == "__main__":
    main()
