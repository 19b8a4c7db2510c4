"""A check of the verl engine on a GPU machine: real verl, real vLLM, a development model.

    python -m akka_training.engines.verl.smoke --verl-python .venv-verl/bin/python \\
        --model MODEL_DIR --workdir DIR [--gpus 1,2] [--steps 2]

For each GPU count it trains a tiny grpo run (``--steps`` steps, a snapshot every step) with
`VerlEngine` through the job entry point's end-report path (`job.run_engine`), exactly as a job
does, against a recording service on loopback and a local blob store, then checks what a user relies on, printing one ``PASS`` or ``FAIL`` line each: the run
finished; every step reported verl's figures; every step's rollouts were kept with their term
shares; every step became a snapshot (training state and adapter); the final adapter loads with
PEFT onto the base model, runs, and moved away from its initialisation (LoRA B starts at zero).
Exits 1 when any check failed. `scripts/gpu-smoke-verl.sh` prepares the environments and calls
it.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from akka_training.blobstore.local import LocalBlobStore
from akka_training.core.resolved import JobSpec
from akka_training.engines.context import JobContext
from akka_training.engines.job import run_engine
from akka_training.engines.reporter import HttpReporter
from akka_training.engines.verl.engine import VerlEngine
from akka_training.rewards.rollouts import read_step_file

# Settings for a small GPU: no CUDA graphs to capture, room for two runs one after the other.
SMOKE_OVERRIDES = [
    "actor_rollout_ref.rollout.enforce_eager=true",
    "actor_rollout_ref.rollout.gpu_memory_utilization=0.3",
    "reward.num_workers=2",
]
FIGURES = (
    "policy_loss",
    "tokens",
    "tokens_per_second",
    "mfu",
    "timing/generation",
    "timing/update",
    "timing/reward",
    "reward/mean",
    "completions/mean_length",
)
PEFT_CHECK = """
import json, sys, torch
from peft import PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer
base, adapter = sys.argv[1:3]
model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base), adapter)
tokenizer = AutoTokenizer.from_pretrained(base)
ids = tokenizer("What is 2 + 3?", return_tensors="pt")["input_ids"]
with torch.no_grad():
    logits = model(input_ids=ids).logits
moved = max(p.abs().max().item() for n, p in model.named_parameters() if "lora_B" in n)
modules = sorted({n.split(".lora_")[0] for n, _ in model.named_parameters() if "lora_A" in n})
print(json.dumps({"finite": bool(torch.isfinite(logits).all()), "lora_b_max": moved,
                  "modules": len(modules)}))
"""


class RecordingService:
    """A stand-in for the trainer service's job endpoints on loopback: records every report
    and answers with the directive `decide` picks (``continue`` by default)."""

    def __init__(self) -> None:
        self.reports: list[tuple[str, dict[str, Any]]] = []
        self.decide: Callable[[str, dict[str, Any]], str] = lambda kind, body: "continue"
        service = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                kind = self.path.rsplit("/", 1)[-1]
                service.reports.append((kind, body))
                answer = json.dumps({"action": service.decide(kind, body)}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def kinds(self) -> list[str]:
        return [k for k, _ in self.reports if k != "heartbeat"]

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [b for k, b in self.reports if k == kind]

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def smoke_spec(model: Path, gpus: int, steps: int) -> JobSpec:
    rows = 16
    dataset = {
        "ref": "smoke/maths",
        "name": "smoke/maths",
        "version": 1,
        "sha256": "0" * 64,
        "rows": rows,
        "bytes": 0,
        "format": "chat",
        "hasImages": False,
        "blob": "datasets/smoke/maths.jsonl",
    }
    config = {
        "dataset": "smoke/maths",
        "method": "grpo",
        "maxSeqLength": 256,
        "rlHyperparams": {
            "promptsPerStep": 4,
            "generationsPerPrompt": 4,
            "maxCompletionTokens": 32,
            "optimizer": {"learningRate": 1e-3},
            "training": {"maxSteps": steps},
        },
        "reward": {
            "terms": [
                {"name": "correct", "kind": "match", "weight": 1.0, "mode": "final-number"},
                {"name": "format", "kind": "regex", "weight": 0.2, "pattern": "#### -?[0-9]+"},
            ]
        },
    }
    settings = {
        "project": "smoke",
        "method": "grpo",
        "engine": "verl",
        "baseModel": {
            "id": "tiny-chat",
            "path": str(model),
            "revision": None,
            "modality": "text",
            "contextLength": 512,
        },
        "dataset": dataset,
        "config": config,
        "execution": {"gpus": gpus, "saveEvery": 1},
    }
    return JobSpec.model_validate(
        {
            "runId": f"smoke-{gpus}gpu",
            "attempt": 1,
            "project": "smoke",
            "trainerUrl": "http://127.0.0.1:9",
            "storageUrl": "file:///",
            "settings": settings,
        }
    )


def check(
    verl_python: Path, model: Path, workdir: Path, gpus: int, steps: int
) -> list[tuple[bool, str]]:
    """Train one smoke run; the checks as (passed, line)."""
    results: list[tuple[bool, str]] = []
    blobs = LocalBlobStore(workdir / "blobs")
    rows = [
        {
            "messages": [
                {"role": "user", "content": f"What is {i} + {i}? End with #### and the number."},
                {"role": "assistant", "content": f"#### {2 * i}"},
            ]
        }
        for i in range(16)
    ]
    blobs.put_bytes(
        "datasets/smoke/maths.jsonl", "".join(json.dumps(r) + "\n" for r in rows).encode()
    )
    spec = smoke_spec(model, gpus, steps)
    service = RecordingService()
    reporter = HttpReporter(service.url, spec.run_id, 1, "smoke", patience=30, heartbeat_seconds=30)
    started = time.monotonic()
    try:
        job = JobContext(spec=spec, reporter=reporter, store=blobs, workdir=workdir / "run")
        code = run_engine(job, VerlEngine(verl_python, extra_overrides=SMOKE_OVERRIDES))
    finally:
        reporter.close()
        service.close()
    seconds = time.monotonic() - started
    finished = service.of("finished")
    failed = service.of("failed")
    results.append(
        (
            code == 0 and bool(finished),
            f"verl trained {steps} step(s) on {gpus} GPU(s) and finished in {seconds:.0f} s"
            + (f": {failed[0]['code']}: {failed[0].get('detail', '')[-1500:]}" if failed else ""),
        )
    )
    step_reports = service.of("steps")
    missing = sorted({f for r in step_reports for f in FIGURES if f not in r["metrics"]})
    results.append(
        (
            [r["step"] for r in step_reports] == list(range(1, steps + 1)) and not missing,
            f"steps {[r['step'] for r in step_reports]} reported"
            + (f", missing figures {missing}" if missing else f" with {', '.join(FIGURES)}"),
        )
    )
    kept = service.of("rollouts")
    counts = [read_step_file(blobs.get_bytes(r["blob"])) for r in kept]
    shares_ok = all(r.shares and not r.explanations.get("record") for step in counts for r in step)
    results.append(
        (
            len(kept) == steps and all(len(c) == 16 for c in counts) and shares_ok,
            f"rollouts kept for {len(kept)} step(s), {[len(c) for c in counts]} each, "
            f"{'with' if shares_ok else 'WITHOUT'} term shares",
        )
    )
    snaps = service.of("snapshots")
    complete = all(
        blobs.exists(f"{s['weights']}/adapter_model.safetensors") and blobs.list(s["trainingState"])
        for s in snaps
    )
    results.append(
        (
            [s["step"] for s in snaps] == list(range(1, steps + 1)) and complete,
            f"snapshots at steps {[s['step'] for s in snaps]} with training state and merged adapter",
        )
    )
    if finished:
        adapter = blobs.get_dir(finished[0]["adapter"], workdir / "final-adapter")
        done = subprocess.run(
            [str(verl_python), "-c", PEFT_CHECK, str(model), str(adapter)],
            capture_output=True,
            text=True,
            timeout=300,
        )
        try:
            peft = json.loads(done.stdout.strip().splitlines()[-1])
            ok = peft["finite"] and peft["lora_b_max"] > 0 and peft["modules"] > 0
            line = (
                f"final adapter loads with PEFT ({peft['modules']} modules), runs, and trained "
                f"(max |lora_B| {peft['lora_b_max']:.2e})"
            )
        except (IndexError, ValueError, KeyError):
            ok, line = False, "final adapter did not load with PEFT: " + done.stderr[-1500:]
        results.append((ok, line))
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m akka_training.engines.verl.smoke")
    parser.add_argument("--verl-python", type=Path, required=True)
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--gpus", default="1")
    parser.add_argument("--steps", type=int, default=2)
    args = parser.parse_args(argv)
    ok = True
    for gpus in (int(g) for g in args.gpus.split(",") if g):
        for passed, line in check(
            args.verl_python, args.model, args.workdir / f"{gpus}gpu", gpus, args.steps
        ):
            ok = ok and passed
            print(f"{'PASS' if passed else 'FAIL'} [{gpus} GPU] {line}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
