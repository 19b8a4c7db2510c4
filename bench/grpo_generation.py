"""A GRPO step's time with transformers' generate against vLLM colocate, on the same model (a
Qwen3 of Qwen2.5-0.5B's layer shape on the development tokenizer, built on the spot) and the same
data, each in a process of its own. GPU only: elsewhere it prints "needs a GPU" and exits 0.

    python bench/grpo_generation.py [--steps 6] [--python PYTHON]

PYTHON is an interpreter with vLLM and TRL (scripts/setup-vllm-env.sh --gpu builds one; default:
this one). Goal: vLLM at least 3x faster per step. Prints both rates, generation's share of
each step, and the ratio.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _has_gpu(python: str) -> bool:
    probe = [python, "-c", "import torch; print(torch.cuda.is_available())"]
    out = subprocess.run(probe, capture_output=True, text=True, check=False)
    return out.stdout.strip().endswith("True")


def _steps_per_second(python: str, workdir: Path, generation: str, steps: int) -> tuple[float, str]:
    command = [
        python, "-m", "akka_training.engines.trl.smoke", str(workdir / generation),
        "--steps", str(steps), "--generation", generation, "--size", "bench", "--only", "grpo",
    ]  # fmt: skip
    env_path = str(ROOT / "src")
    out = subprocess.run(
        command,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHONPATH": env_path},
    )
    line = next(
        (x for x in out.stdout.splitlines() if x.startswith(("PASS trl grpo:", "FAIL trl grpo:"))),
        "",
    )
    match = re.search(r"steps/s ([0-9.]+)", line)
    if match is None:
        raise SystemExit(
            f"the {generation} run printed no rate:\n{out.stdout}\n{out.stderr[-2000:]}"
        )
    return float(match.group(1)), line


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--python", default=sys.executable)
    args = parser.parse_args()
    if not _has_gpu(args.python):
        print("needs a GPU")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        hf, hf_line = _steps_per_second(args.python, Path(tmp), "hf", args.steps)
        vllm, vllm_line = _steps_per_second(args.python, Path(tmp), "vllm", args.steps)
    print(hf_line)
    print(vllm_line)
    print(f"vLLM colocate / generate: {vllm / hf:.2f}x steps per second (goal: at least 3x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
