"""The first run of the verl engine on a GPU machine: real verl, real vLLM, a small model.

    python -m akka_training.engines.verl.smoke --verl-python .venv-verl/bin/python \\
        --model MODEL_DIR --workdir DIR [--steps 4] [--pause-at 2] [--seconds 480] [--dry-run]

One grpo run on one GPU through `VerlEngine` and the job entry point's end-report path
(`job.run_engine`), exactly as a job runs, against a recording service on loopback and a local
blob store, in three acts, each with its own attempt as the service would start them:

1. train from step 1, a snapshot every step; the service answers ``save-and-stop`` once step
   ``--pause-at`` is reported (``akka training runs pause --checkpoint save``), so verl saves at
   the end of the step it is in and the attempt reports ``stopped``;
2. resume from that snapshot in a new attempt (its job directory beside the first, so the
   checkpoint on the node is reused, not downloaded); the service answers ``stop`` (a cancel)
   once the next step is reported;
3. check what a user relies on, one ``PASS``/``FAIL`` line each: the pause saved and stopped,
   the resume continued from the saved step without downloading the training state, the cancel
   stopped, every step reported verl's figures, the snapshots are complete, verl left no process
   behind, and the last snapshot's adapter loads with PEFT onto the base model, runs, and moved
   away from its initialisation.

It ends with a summary: the memory verl reports (``actor/perf/max_memory_allocated_gb`` as the
V1 trainer logs it, or ``perf/max_memory_allocated_gb``; reserved; and the share vLLM holds),
MFU, tokens per second, the snapshot sizes in the store, whether the adapter loaded, and the
time each act took. ``--seconds`` bounds the whole check (each act gets what is left).
``--dry-run`` is for a machine without a GPU: the same acts with any interpreter that stands
in for verl's, and the adapter checked as a PEFT configuration instead of loaded onto the
model. Exits 1 when any check failed. `scripts/gpu-smoke-verl.sh` prepares the environments
and calls it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from akka_training.blobstore.local import LocalBlobStore
from akka_training.core.reports import strongest, unbatched
from akka_training.core.resolved import JobSpec
from akka_training.engines.context import JobContext
from akka_training.engines.job import run_engine
from akka_training.engines.reporter import HttpReporter
from akka_training.engines.verl.engine import VerlEngine
from akka_training.engines.verl.launcher import marked_processes
from akka_training.engines.verl.metrics import MEMORY_GIB
from akka_training.engines.verl.paths import VerlPaths

# No CUDA graphs to capture (minutes saved on a first run), a known share of the GPU for vLLM.
VLLM_SHARE = 0.4
SMOKE_OVERRIDES = [
    "actor_rollout_ref.rollout.enforce_eager=true",
    f"actor_rollout_ref.rollout.gpu_memory_utilization={VLLM_SHARE}",
    "reward.num_workers=2",
]
# verl's own memory names, the V1 trainer's (``actor/``-prefixed) then the legacy trainer's.
MEMORY_NAMES = tuple(name for names in MEMORY_GIB.values() for name in names)
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
from peft import PeftConfig, PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer
base, adapter, dry = sys.argv[1:4]
config = PeftConfig.from_pretrained(adapter)
if dry == "1":
    print(json.dumps({"finite": True, "lora_b_max": 1.0, "modules": len(config.target_modules),
                      "alpha": config.lora_alpha, "r": config.r}))
    sys.exit(0)
model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base), adapter)
tokenizer = AutoTokenizer.from_pretrained(base)
ids = tokenizer("What is 2 + 3?", return_tensors="pt")["input_ids"]
with torch.no_grad():
    logits = model(input_ids=ids).logits
moved = max(p.abs().max().item() for n, p in model.named_parameters() if "lora_B" in n)
modules = sorted({n.split(".lora_")[0] for n, _ in model.named_parameters() if "lora_A" in n})
print(json.dumps({"finite": bool(torch.isfinite(logits).all()), "lora_b_max": moved,
                  "modules": len(modules), "alpha": config.lora_alpha, "r": config.r}))
"""


class RecordingService:
    """A stand-in for the trainer service's job endpoints on loopback: records every report
    and answers with the directive `decide` picks (``continue`` by default). A job's bootstrap
    exchange is answered with a token of its own and no store credentials (a local store)."""

    def __init__(self) -> None:
        self.reports: list[tuple[str, dict[str, Any]]] = []
        self.decide: Callable[[str, dict[str, Any]], str] = lambda kind, body: "continue"
        # Notified with each report taken (`wait_for`).
        self._taken = threading.Condition()
        service = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self.path == "/v1/jobs/bootstrap":
                    bootstrap = self.headers.get("Authorization", "").removeprefix("Bearer ")
                    self._answer({"token": f"exchanged:{bootstrap}", "env": {}})
                    return
                kind = self.path.rsplit("/", 1)[-1]
                actions = []
                with service._taken:
                    for one_kind, one in unbatched(kind, body):  # a batch as its reports
                        service.reports.append((one_kind, one))
                        actions.append(service.decide(one_kind, one))
                    service._taken.notify_all()
                self._answer({"action": strongest(actions)})

            def _answer(self, body: dict[str, Any]) -> None:
                answer = json.dumps(body).encode()
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

    def wait_for(self, kind: str, timeout: float) -> list[dict[str, Any]]:
        """The reports of `kind` once there is one (none after `timeout` seconds)."""
        with self._taken:
            self._taken.wait_for(lambda: any(k == kind for k, _ in self.reports), timeout)
            return self.of(kind)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class _CountingStore(LocalBlobStore):
    """The local blob store, recording what was downloaded as a directory."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.downloads: list[str] = []

    def get_dir(self, prefix: str, directory: Path) -> Path:
        self.downloads.append(prefix)
        return super().get_dir(prefix, directory)


def smoke_spec(
    model: Path,
    steps: int,
    *,
    gpus: int = 1,
    attempt: int = 1,
    resume: dict[str, Any] | None = None,
    prompts_per_step: int = 4,
) -> JobSpec:
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
            "promptsPerStep": prompts_per_step,
            "generationsPerPrompt": 4,
            "maxCompletionTokens": 32,
            "optimizer": {"learningRate": 1e-3},
            "training": {"maxSteps": steps},
            "lora": {"rank": 8, "alpha": 16},
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
            "id": model.name,
            "path": str(model),
            "revision": None,
            "modality": "text",
            "contextLength": 512,
        },
        "dataset": dataset,
        "config": config,
        # verl saves at the last step and on the pause's request: one export each
        "execution": {"gpus": gpus, "saveEvery": 100},
    }
    body: dict[str, Any] = {
        "runId": f"smoke-{gpus}gpu",
        "attempt": attempt,
        "project": "smoke",
        "trainerUrl": "http://127.0.0.1:9",
        "storageUrl": "file:///",
        "settings": settings,
    }
    if resume is not None:
        body["resume"] = resume
    return JobSpec.model_validate(body)


@dataclass
class Act:
    """One attempt of the smoke run, as the service saw it."""

    name: str
    code: int
    seconds: float
    reports: list[tuple[str, dict[str, Any]]]
    left_behind: list[int] = field(default_factory=list)

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [b for k, b in self.reports if k == kind]

    @property
    def end(self) -> str:
        ends = [k for k, _ in self.reports if k in ("finished", "stopped", "failed")]
        return ends[-1] if ends else "none"

    @property
    def failure(self) -> str:
        failed = self.of("failed")
        return f": {failed[0]['code']}: {failed[0].get('detail', '')[-1500:]}" if failed else ""


class Smoke:
    """The three acts against one blob store and one run, within `seconds` in all."""

    def __init__(
        self,
        verl_python: Path,
        model: Path,
        workdir: Path,
        *,
        steps: int,
        pause_at: int,
        seconds: float,
        dry_run: bool,
    ) -> None:
        self.verl_python, self.model, self.workdir = verl_python, model, workdir
        self.steps, self.pause_at, self.dry_run = steps, pause_at, dry_run
        # A stand-in for verl replays steps of two prompts (its fixtures' steps).
        self.prompts_per_step = 2 if dry_run else 4
        self.deadline = time.monotonic() + seconds
        self.blobs = _CountingStore(workdir / "blobs")
        rows = [
            {
                "messages": [
                    {
                        "role": "user",
                        "content": f"What is {i} + {i}? End with #### and the number.",
                    },
                    {"role": "assistant", "content": f"#### {2 * i}"},
                ]
            }
            for i in range(16)
        ]
        self.blobs.put_bytes(
            "datasets/smoke/maths.jsonl", "".join(json.dumps(r) + "\n" for r in rows).encode()
        )

    def job_dir(self, attempt: int) -> Path:
        return self.workdir / "jobs" / "smoke-1gpu" / str(attempt)

    def act(self, name: str, spec: JobSpec, decide: Callable[[str, dict[str, Any]], str]) -> Act:
        """Run one attempt; past the deadline the service answers ``stop`` (a cancel)."""
        service = RecordingService()
        service.decide = lambda kind, body: (
            "stop" if time.monotonic() > self.deadline else decide(kind, body)
        )
        # Each report on its own: the acts pause and cancel at a named step, which must not
        # wait a report interval for its answer (a stand-in's steps are far shorter than one).
        reporter = HttpReporter(
            service.url,
            spec.run_id,
            spec.attempt,
            "smoke",
            patience=30,
            heartbeat_seconds=30,
            report_seconds=0,
        )
        started = time.monotonic()
        try:
            job = JobContext(
                spec=spec, reporter=reporter, store=self.blobs, workdir=self.job_dir(spec.attempt)
            )
            code = run_engine(job, VerlEngine(self.verl_python, extra_overrides=SMOKE_OVERRIDES))
        finally:
            reporter.close()
            service.close()
        prefix = f"{spec.run_id}/"
        left = [p.pid for p in marked_processes(lambda value: value.startswith(prefix))]
        return Act(name, code, time.monotonic() - started, list(service.reports), left)

    def run(self) -> list[Act]:
        acts = []
        pause = self.act(
            "train, then pause with --checkpoint save",
            smoke_spec(self.model, self.steps, prompts_per_step=self.prompts_per_step),
            lambda kind, body: (
                "save-and-stop" if kind == "steps" and body["step"] >= self.pause_at else "continue"
            ),
        )
        acts.append(pause)
        saved = pause.of("snapshots")
        if pause.end != "stopped" or not saved:
            return acts
        snapshot = saved[-1]
        resume = {
            "snapshot": snapshot["name"],
            "step": snapshot["step"],
            "weights": snapshot["weights"],
            "trainingState": snapshot["trainingState"],
        }
        self.blobs.downloads.clear()
        acts.append(
            self.act(
                "resume, then cancel",
                smoke_spec(
                    self.model,
                    self.steps,
                    attempt=2,
                    resume=resume,
                    prompts_per_step=self.prompts_per_step,
                ),
                lambda kind, body: (
                    "stop" if kind == "steps" and body["step"] > snapshot["step"] else "continue"
                ),
            )
        )
        return acts


def check(smoke: Smoke, acts: list[Act]) -> Iterator[tuple[bool, str]]:
    """The checks, as (passed, line)."""
    pause = acts[0]
    stopped = pause.of("stopped")
    saved = pause.of("snapshots")
    yield (
        pause.end == "stopped" and bool(saved) and stopped[0]["step"] == saved[-1]["step"],
        f"pause --checkpoint save: {pause.end} at step "
        f"{stopped[0]['step'] if stopped else '-'} with a snapshot of step "
        f"{saved[-1]['step'] if saved else '-'} in {pause.seconds:.0f} s{pause.failure}",
    )
    steps = [b["step"] for b in pause.of("steps")]
    missing = sorted({f for r in pause.of("steps") for f in FIGURES if f not in r["metrics"]})
    yield (
        bool(steps) and steps == list(range(1, len(steps) + 1)) and not missing,
        f"steps {steps} reported"
        + (f", missing figures {missing}" if missing else f" with {', '.join(FIGURES)}"),
    )
    complete = [
        s["step"]
        for s in saved
        if smoke.blobs.exists(f"{s['weights']}adapter_model.safetensors")
        and smoke.blobs.exists(f"{s['weights']}adapter_config.json")
        and smoke.blobs.exists(f"{s['trainingState']}akka-verl.json")
    ]
    yield (
        bool(saved) and complete == [s["step"] for s in saved],
        f"snapshots at steps {[s['step'] for s in saved]}, complete: {complete}",
    )
    if len(acts) < 2:
        yield False, "resume: not attempted (the pause did not stop with a snapshot)"
    else:
        resumed = acts[1]
        after = [b["step"] for b in resumed.of("steps")]
        start = saved[-1]["step"]
        yield (
            resumed.end == "stopped" and bool(after) and after[0] == start + 1,
            f"resume from step {start} then cancel: {resumed.end} at step "
            f"{resumed.of('stopped')[0]['step'] if resumed.of('stopped') else '-'}, steps {after} "
            f"in {resumed.seconds:.0f} s{resumed.failure}",
        )
        yield (
            not smoke.blobs.downloads,
            "the resume reused the checkpoint on the node"
            if not smoke.blobs.downloads
            else f"the resume downloaded {smoke.blobs.downloads}",
        )
    left = sorted({pid for act in acts for pid in act.left_behind})
    yield not left, "no process of verl left behind" if not left else f"left behind: pids {left}"


def peft_check(smoke: Smoke, acts: list[Act]) -> tuple[bool, str, dict[str, Any]]:
    """The newest snapshot's adapter loaded with PEFT onto the base model (on a dry run: read
    as a PEFT configuration)."""
    snaps = [s for act in acts for s in act.of("snapshots")]
    if not snaps:
        return False, "adapter: no snapshot to load", {}
    adapter = smoke.blobs.get_dir(snaps[-1]["weights"], smoke.workdir / "adapter")
    python = sys.executable if smoke.dry_run else str(smoke.verl_python)
    remaining = max(30.0, smoke.deadline - time.monotonic())
    done = subprocess.run(
        [python, "-c", PEFT_CHECK, str(smoke.model), str(adapter), "1" if smoke.dry_run else "0"],
        capture_output=True,
        text=True,
        timeout=min(300.0, remaining + 60),
    )
    try:
        peft = json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return False, "adapter did not load with PEFT: " + done.stderr[-1500:], {}
    ok = peft["finite"] and peft["lora_b_max"] > 0 and peft["modules"] > 0
    how = "reads as a PEFT configuration (dry run)" if smoke.dry_run else "loads with PEFT"
    line = (
        f"adapter of {snaps[-1]['name']} {how}: {peft['modules']} modules, r {peft['r']}, "
        f"alpha {peft['alpha']}, max |lora_B| {peft['lora_b_max']:.2e}"
    )
    return ok, line, peft


def summary(smoke: Smoke, acts: list[Act], adapter_ok: bool) -> list[str]:
    """What the first run measured, for a person to read."""
    root = VerlPaths.for_job(smoke.job_dir(1), 1).root
    raw: dict[str, float] = {}
    for attempt in range(1, len(acts) + 1):
        metrics_file = VerlPaths(root, attempt).metrics_file
        if metrics_file.exists():
            for line in metrics_file.read_text().splitlines():
                with contextlib.suppress(ValueError, KeyError, TypeError):
                    raw.update(json.loads(line)["data"])
    steps = [r["metrics"] for act in acts for r in act.of("steps")]
    last = steps[-1] if steps else {}
    memory = {name: raw[name] for name in MEMORY_NAMES if name in raw}
    snaps = [s for act in acts for s in act.of("snapshots")]
    lines = ["SUMMARY"]
    if memory:
        lines += [f"  memory      {name} = {value:.2f} GiB" for name, value in memory.items()]
    else:
        lines.append("  memory      verl reported no memory figures")
    total = _gpu_memory_gib(smoke)
    lines.append(
        f"  memory      vLLM holds gpu_memory_utilization {VLLM_SHARE}"
        + (f" of {total:.0f} GiB = {VLLM_SHARE * total:.1f} GiB" if total else "")
    )
    for name, label in (("mfu", "MFU"), ("tokens_per_second", "tokens/s")):
        value = last.get(name)
        lines.append(f"  {label:<11} {value:.4g}" if value is not None else f"  {label:<11} -")
    for s in snaps[-1:]:
        lines.append(
            f"  snapshot    {s['name']}: adapter {_size(s.get('weightsBytes'))}, training state "
            f"{_size(s.get('trainingStateBytes'))}"
        )
    lines.append(f"  adapter     {'loads in PEFT' if adapter_ok else 'DID NOT LOAD in PEFT'}")
    for act in acts:
        lines.append(f"  {act.name}: {act.end} in {act.seconds:.0f} s")
    return lines


def _gpu_memory_gib(smoke: Smoke) -> float | None:
    if smoke.dry_run:
        return None
    probe = "import torch; print(torch.cuda.get_device_properties(0).total_memory)"
    done = subprocess.run(
        [str(smoke.verl_python), "-c", probe], capture_output=True, text=True, timeout=120
    )
    try:
        return int(done.stdout.strip().splitlines()[-1]) / 2**30
    except (IndexError, ValueError):
        return None


def _size(value: int | None) -> str:
    return "-" if value is None else f"{value / 2**20:.2f} MiB"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m akka_training.engines.verl.smoke")
    parser.add_argument("--verl-python", type=Path, required=True)
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--pause-at", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=480.0)
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args(argv)
    smoke = Smoke(
        args.verl_python,
        args.model,
        args.workdir,
        steps=args.steps,
        pause_at=args.pause_at,
        seconds=args.seconds,
        dry_run=args.dry_run,
    )
    acts = smoke.run()
    ok = True
    for passed, line in check(smoke, acts):
        ok = ok and passed
        print(f"{'PASS' if passed else 'FAIL'} {line}", flush=True)
    adapter_ok, line, _ = peft_check(smoke, acts)
    ok = ok and adapter_ok
    print(f"{'PASS' if adapter_ok else 'FAIL'} {line}", flush=True)
    print("\n".join(summary(smoke, acts, adapter_ok)), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
