"""An evaluation's generation, the old way against the new, on the same model and prompts:
transformers' `generate` one prompt at a time (as evaluations generated before) and the
generation engine in batches (`engines.tasks.evaluate.generate`), and the engine a prompt at a
time (what batching adds). Greedy, so all give the same completions; prints each one's prompts
per second, the ratio new/old, and whether they agree.

    python bench/evaluation_generation.py [--rows 64] [--tokens 32] [--size bench]

The model is the development tiny-chat (`python -m akka_training.devmodels` builds it), or with
`--size bench` a Qwen3 of Qwen2.5-0.5B's layer shape built on the spot (worth it on a GPU). It
runs on the GPU when there is one, on the CPUs otherwise. No time is asserted.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from akka_training.core.evaluations import Generation
from akka_training.devmodels.catalog import read_catalog
from akka_training.engines.generation import BASE
from akka_training.engines.generation.engine import GenerationEngine
from akka_training.engines.tasks import evaluate
from akka_training.engines.tasks.evaluate import _encode_prompt, generate
from akka_training.engines.trl.smoke import build_model

ROOT = Path(__file__).resolve().parents[1]
WORDS = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]


def prompts(tokenizer: Any, count: int) -> list[list[int]]:
    """Chat prompts of uneven lengths (3 to 40 words), as an evaluation encodes them."""
    out = []
    for i in range(count):
        words = " ".join(WORDS[j % len(WORDS)] for j in range(3 + (7 * i) % 38))
        out.append(_encode_prompt(tokenizer, [{"role": "user", "content": f"Count on: {words}"}]))
    return out


def old_way(
    model: Any, tokenizer: Any, rows: list[list[int]], generation: Generation
) -> list[list[tuple[str, int, str]]]:
    """Transformers' greedy generate a prompt at a time, cut at the end-of-sequence token."""
    out = []
    for prompt in rows:
        ids = torch.tensor([prompt], device=model.device)
        with torch.no_grad():
            generated = model.generate(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=generation.max_completion_tokens,
                do_sample=False,
                pad_token_id=tokenizer.pad_token_id,
            )
        samples = []
        for sequence in generated[:, ids.shape[1] :].tolist():
            finish = "length"
            if tokenizer.eos_token_id in sequence:
                sequence = sequence[: sequence.index(tokenizer.eos_token_id)]
                finish = "stop"
            text = tokenizer.decode(sequence, skip_special_tokens=True).strip()
            samples.append((text, len(sequence), finish))
        out.append(samples)
    return out


def new_way(
    engine: GenerationEngine, rows: list[list[int]], generation: Generation, batch: int = 64
) -> list[list[tuple[str, int, str]]]:
    """The engine in batches of up to `batch` prompts."""
    evaluate.BATCH_COMPLETIONS = batch
    answered = dict(
        pair for batch in generate(engine, BASE, rows, generation, 42) for pair in batch
    )
    return [answered[i] for i in range(len(rows))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--size", choices=["dev", "bench"], default="dev")
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    with tempfile.TemporaryDirectory() as scratch:
        if args.size == "bench":
            directory = build_model(Path(scratch) / "model", "bench")
        else:
            catalog = {e["id"]: e for e in read_catalog(ROOT / ".cache" / "devmodels")}
            directory = Path(catalog["tiny-chat"]["path"])
        dtype = torch.bfloat16 if device == "cuda" else torch.float32
        tokenizer = AutoTokenizer.from_pretrained(str(directory))
        model: Any = AutoModelForCausalLM.from_pretrained(str(directory), dtype=dtype)
        model = model.to(device).eval()
        engine = GenerationEngine(directory, device=device, model=model, tokenizer=tokenizer)
        generation = Generation(max_completion_tokens=args.tokens, temperature=0)
        rows = prompts(tokenizer, args.rows)
        old_way(model, tokenizer, rows[:2], generation)  # warm up both
        new_way(engine, rows[:2], generation)
        rates: dict[str, float] = {}
        answers: dict[str, list[list[tuple[str, int, str]]]] = {}
        ways: list[tuple[str, Callable[[], list[list[tuple[str, int, str]]]]]] = [
            ("old", lambda: old_way(model, tokenizer, rows, generation)),
            ("new", lambda: new_way(engine, rows, generation)),
            ("alone", lambda: new_way(engine, rows, generation, batch=1)),
        ]
        for name, run in ways:
            if device == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            answers[name] = run()
            if device == "cuda":
                torch.cuda.synchronize()
            rates[name] = len(rows) / (time.perf_counter() - start)
    print(f"{args.rows} prompts, {args.tokens} tokens each, greedy, model {args.size} on {device}")
    print(f"old: transformers generate a prompt at a time   {rates['old']:8.2f} prompts/s")
    print(f"new: generation engine in batches               {rates['new']:8.2f} prompts/s")
    print(f"     the engine a prompt at a time              {rates['alone']:8.2f} prompts/s")
    print(f"ratio new/old: {rates['new'] / rates['old']:.2f}x")
    same = answers["old"] == answers["new"] == answers["alone"]
    print(f"same completions: {'yes' if same else 'no'}")


if __name__ == "__main__":
    main()
