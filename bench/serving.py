"""Serving overhead: what the trainer's front door (``/openai/v1``: the token checked, the
`model` resolved, the request relayed) adds to an endpoint's answers, against the endpoint
job's own server called directly. A real trainer starts an endpoint of the development model
`tiny-chat` on CPU; streamed chat completions (greedy, so both sides generate the same tokens)
go through the trainer and straight to the job, in bursts of 1 and of `--streams` (32) at once,
`--repeats` times each, alternating which side goes first so that a noisy moment falls on both.
For each burst size it prints the medians over the repeats (their spread min-max) of:

- time to first token: the median over a burst's streams of the time from sending the request
  to the first chunk that carries text; goal: the trainer adds at most 5% and at most 10 ms;
- output tokens/s: the burst's completion tokens (the usage of each stream's last chunk) over
  the burst's wall time; goal: at least 95% of direct's (the trainer costs at most 5%),

then the ratios trainer / direct and "met" or "not met", and the trainer process's own CPU
time during its side's bursts (Linux's /proc): per token relayed, and as a share of a core. It
prints, never asserts: timings on a shared machine are for reading.

    python bench/serving.py [--streams 32] [--repeats 3] [--max-tokens 64]
        [--adapters] [--vllm PYTHON] [--smoke] [--gpu]

`--adapters` trains a short SFT run of `tiny-chat` first and serves two of its adapters (its
snapshot step-2 and its final adapter) on the one endpoint, the streams of a burst alternating
between them. `--vllm PYTHON` also starts vLLM's own OpenAI server alone (with that Python, on
the same base model and the same adapters, downloaded) and measures it as a third side; the
ratios against it say what the trainer and its engine cost against vLLM alone. `--smoke`
prints a PASS or FAIL line for each check (the endpoint READY with its adapters, each adapter
answering, each goal) and exits 1 when one failed: `scripts/gpu-smoke-serving.sh` runs it on a
GPU with `--gpu` (the pool sized from the machine's GPUs, not a CPU pool of one device).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

from akka_training.core.serving import ADAPTER_HEADER, KEY_HEADER
from akka_training.testing.service import TrainerProcess, free_port
from akka_training.testing.waiting import until

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "examples" / "data"
MESSAGES = [{"role": "user", "content": "Count from one to twenty, in words."}]


@dataclass(frozen=True)
class Burst:
    ttft: float  # seconds, the median over the burst's answered streams
    tokens: int  # completion tokens of the answered streams
    wall: float  # seconds, the burst's wall time
    failed: int = 0  # streams not answered
    error: str = ""  # the first one's error
    trainer_cpu: float = 0.0  # the trainer process's CPU seconds during the burst

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.wall


async def _stream(
    client: httpx.AsyncClient, url: str, headers: dict[str, str], body: dict[str, object]
) -> tuple[float, int]:
    """(time to first text, completion tokens) of one streamed chat completion."""
    start = time.perf_counter()
    first: float | None = None
    tokens = 0
    async with client.stream("POST", url, json=body, headers=headers) as response:
        if response.status_code != 200:
            await response.aread()
            raise RuntimeError(f"{url} answered {response.status_code}: {response.text[:300]}")
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if first is None and any(
                (c.get("delta") or {}).get("content") for c in chunk.get("choices", [])
            ):
                first = time.perf_counter() - start
            if chunk.get("usage"):
                tokens = int(chunk["usage"]["completion_tokens"])
    if first is None:
        raise RuntimeError(f"{url} streamed no text; raise --max-tokens or change the prompt")
    return first, tokens


@dataclass(frozen=True)
class Side:
    """Where a side's streams go: its chat completions URL, its headers, and the models its
    streams alternate between, each a body's `model` with any headers of its own."""

    url: str
    headers: dict[str, str]
    models: list[tuple[str, dict[str, str]]]


async def _burst(side: Side, streams: int, max_tokens: int) -> Burst:
    def request(i: int) -> tuple[dict[str, str], dict[str, object]]:
        model, own = side.models[i % len(side.models)]
        body: dict[str, object] = {
            "model": model,
            "messages": MESSAGES,
            "max_tokens": max_tokens,
            "temperature": 0,
            "stream": True,
        }
        return {**side.headers, **own}, body

    limits = httpx.Limits(max_connections=streams, max_keepalive_connections=streams)
    async with httpx.AsyncClient(timeout=600, limits=limits) as client:
        start = time.perf_counter()
        results = await asyncio.gather(
            *(_stream(client, side.url, *request(i)) for i in range(streams)),
            return_exceptions=True,
        )
        wall = time.perf_counter() - start
    done = [r for r in results if isinstance(r, tuple)]
    errors = [r for r in results if not isinstance(r, tuple)]
    if not done:
        raise RuntimeError(f"no stream of {streams} was answered: {errors[0]}")
    return Burst(
        ttft=statistics.median(t for t, _ in done),
        tokens=sum(n for _, n in done),
        wall=wall,
        failed=len(errors),
        error=str(errors[0]) if errors else "",
    )


def _cpu_seconds(pid: int) -> float:
    """The CPU (user and system) process `pid` has used, from Linux's /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _measured(trainer: TrainerProcess, side: Side, streams: int, max_tokens: int) -> Burst:
    """`_burst`, with the trainer's CPU seconds during it."""
    assert trainer.proc is not None
    before = _cpu_seconds(trainer.proc.pid)
    burst = asyncio.run(_burst(side, streams, max_tokens))
    return dataclasses.replace(burst, trainer_cpu=_cpu_seconds(trainer.proc.pid) - before)


def _address(trainer: TrainerProcess, endpoint_id: str) -> tuple[str, str]:
    """The endpoint job's own server and the key it answers, as its job reported them to the
    trainer (the job answers only requests that carry it, as the front door's do)."""
    db = sqlite3.connect(trainer.home / "trainer.db")
    try:
        row = db.execute("SELECT progress FROM tasks WHERE id = ?", (endpoint_id,)).fetchone()
    finally:
        db.close()
    progress = json.loads(row[0])
    return str(progress["address"]), str(progress.get("key", ""))


def _spread(values: list[float], scale: float = 1.0, digits: int = 1) -> str:
    shown = [v * scale for v in values]
    return (
        f"{statistics.median(shown):.{digits}f} ({min(shown):.{digits}f}-{max(shown):.{digits}f})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=32, help="Streams of the larger burst.")
    parser.add_argument("--repeats", type=int, default=3, help="Bursts of each size, each side.")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument(
        "--adapters", action="store_true", help="Serve two adapters of a short run."
    )
    parser.add_argument("--vllm", metavar="PYTHON", help="Measure vLLM alone too, with PYTHON.")
    parser.add_argument("--smoke", action="store_true", help="PASS/FAIL lines; exit 1 on FAIL.")
    parser.add_argument("--gpu", action="store_true", help="Serve on this machine's GPUs.")
    args = parser.parse_args()
    checks = Checks(args.smoke)
    models = REPO / ".cache" / "devmodels"
    subprocess.run(
        [sys.executable, "-m", "akka_training.devmodels", "build", str(models)],
        check=True,
        capture_output=True,
    )
    settings: dict[str, object] = {"dev-models-dir": str(models)}
    if not args.gpu:
        settings["pools"] = [{"name": "default", "accelerator": "cpu", "devices": 1}]
    vllm: subprocess.Popen[bytes] | None = None
    with tempfile.TemporaryDirectory() as tmp:
        trainer = TrainerProcess(Path(tmp), {"trainer": settings}).start()
        try:
            trainer.cli("training", "projects", "create", "bench")
            adapters = _train(trainer) if args.adapters else []
            began = time.monotonic()
            create = ["training", "endpoints", "create", "bench", "--base", "tiny-chat"]
            for name in adapters:
                create += ["--adapter", name]
            created = trainer.cli_json(*create, "--idle-minutes", "0", "--project", "bench")
            until(
                lambda: (
                    trainer.cli_json("training", "endpoints", "get", "bench", "--project", "bench")[
                        "phase"
                    ]
                    == "READY"
                ),
                what="the endpoint to be READY",
                timeout=600,
                detail=lambda: trainer.log()[-3000:],
            )
            checks.check(
                True,
                f"endpoint READY in {time.monotonic() - began:.0f} s serving tiny-chat"
                + (f" and {len(adapters)} adapters: {', '.join(adapters)}" if adapters else ""),
            )
            names = adapters or ["tiny-chat"]
            direct, key = _address(trainer, created["id"])
            sides = {
                "trainer": Side(
                    f"{trainer.url}/openai/v1/chat/completions",
                    {"Authorization": f"Bearer {trainer.admin_token}"},
                    [(n, {}) for n in names],
                ),
                "direct": Side(
                    f"{direct}/v1/chat/completions",
                    {KEY_HEADER: key},
                    [(n, {ADAPTER_HEADER: n} if adapters else {}) for n in names],
                ),
            }
            if args.vllm:
                vllm, sides["vllm"] = _vllm_alone(trainer, args.vllm, adapters, Path(tmp))
            device = "GPU" if args.gpu else "CPU"
            print(
                f"tiny-chat on {device}, greedy, {args.max_tokens} tokens at most, "
                f"{args.repeats} repeats; models {', '.join(names)}; trainer {trainer.url}, "
                f"direct {direct}"
            )
            # Warm every path (the model's first batch, the connections); each model answers.
            for side_name, side in sides.items():
                for model in side.models:
                    one = Side(side.url, side.headers, [model])
                    try:
                        asyncio.run(_burst(one, 1, args.max_tokens))
                        checks.check(True, f"{side_name}: {model[0]} answered")
                    except RuntimeError as exc:
                        checks.check(False, f"{side_name}: {model[0]}: {exc}")
            for streams in (1, args.streams):
                got: dict[str, list[Burst]] = {name: [] for name in sides}
                for repeat in range(args.repeats):
                    order = list(sides)
                    if repeat % 2:
                        order.reverse()
                    for side_name in order:
                        got[side_name].append(
                            _measured(trainer, sides[side_name], streams, args.max_tokens)
                        )
                _report(streams, got, checks)
            trainer.cli("training", "endpoints", "delete", "bench", "--project", "bench")
        finally:
            if vllm is not None:
                vllm.terminate()
                try:
                    vllm.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    vllm.kill()
                    vllm.wait()
            trainer.stop()
    sys.exit(checks.status)


class Checks:
    """PASS and FAIL lines when `smoke`; the exit status says whether one failed."""

    def __init__(self, smoke: bool) -> None:
        self.smoke = smoke
        self.status = 0

    def check(self, ok: bool, what: str) -> None:
        if not ok:
            self.status = 1 if self.smoke else 0
        if self.smoke or not ok:
            print(f"{'PASS' if ok else 'FAIL'} {what}", flush=True)


def _train(trainer: TrainerProcess) -> list[str]:
    """Two adapters of a short SFT run: its snapshot step-2 and its final adapter."""
    trainer.cli(
        "training", "datasets", "register", "bench/arithmetic", "-f",
        str(DATA / "arithmetic.jsonl"),
    )  # fmt: skip
    plan = Path(trainer.home) / "plan.json"
    plan.write_text(
        json.dumps(
            {
                "kind": "run",
                "project": "bench",
                "baseModel": "tiny-chat",
                "config": {
                    "dataset": "bench/arithmetic",
                    "method": "sft",
                    "maxSeqLength": 256,
                    "hyperparams": {"training": {"maxSteps": 4, "batchSize": 2}},
                },
                "execution": {"gpus": 1, "saveEvery": 2},
            }
        )
    )
    run = str(trainer.cli_json("training", "runs", "start", "-f", str(plan))["id"])
    trainer.cli("training", "runs", "wait", run, "--exit-status", timeout=900)
    return [f"{run}:step-2", run]


def _vllm_alone(
    trainer: TrainerProcess, python: str, adapters: list[str], tmp: Path
) -> tuple[subprocess.Popen[bytes], Side]:
    """vLLM's OpenAI server on the same base model and adapters, started with `python`."""
    base = trainer.cli_json("training", "base-models", "get", "tiny-chat")["path"]
    modules = []
    for i, name in enumerate(adapters):
        run, _, snapshot = name.partition(":")
        target = tmp / f"adapter-{i}"
        extra = ["--snapshot", snapshot] if snapshot else []
        trainer.cli("training", "runs", "download", run, *extra, "--dir", str(target))
        modules.append(f"adapter-{i}={target}")
    port = free_port()
    command = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", base]
    command += ["--host", "127.0.0.1", "--port", str(port), "--served-model-name", "tiny-chat"]
    if modules:
        command += ["--enable-lora", "--max-loras", str(len(modules)), "--max-lora-rank", "64"]
        command += ["--lora-modules", *modules]
    log = open(tmp / "vllm.log", "wb")  # noqa: SIM115 - kept open for the child's lifetime
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        if process.poll() is not None:
            raise RuntimeError(
                f"vLLM exited {process.returncode}:\n{(tmp / 'vllm.log').read_text()[-3000:]}"
            )
        try:
            return httpx.get(f"{url}/v1/models", timeout=5).status_code == 200
        except httpx.HTTPError:
            return False

    until(up, what="vLLM alone to serve", timeout=600)
    names = [m.split("=")[0] for m in modules] or ["tiny-chat"]
    return process, Side(f"{url}/v1/chat/completions", {}, [(n, {}) for n in names])


def _report(streams: int, got: dict[str, list[Burst]], checks: Checks) -> None:
    print(f"\n{streams} concurrent stream(s):")
    for side, bursts in got.items():
        ttft = [b.ttft for b in bursts]
        tps = [b.tokens_per_second for b in bursts]
        print(
            f"  {side:8} time to first token {_spread(ttft, 1000)} ms; "
            f"output {_spread(tps)} tokens/s"
        )
    for side, bursts in got.items():
        failed = sum(b.failed for b in bursts)
        first = next((b.error for b in bursts if b.error), "")
        checks.check(
            failed == 0,
            f"{streams} stream(s): {side} answered every stream"
            + (f" but {failed} ({first[:300]})" if failed else ""),
        )
    ours = got["trainer"]
    tokens = sum(b.tokens for b in ours)
    cpu = sum(b.trainer_cpu for b in ours)
    if tokens:
        print(
            f"  the trainer's own CPU on its side: {cpu:.2f} s for {tokens} tokens relayed, "
            f"{cpu / tokens * 1e6:.0f} us a token, {cpu / sum(b.wall for b in ours):.0%} of a "
            "core during its bursts"
        )
    for against in [s for s in ("direct", "vllm") if s in got]:
        _compare(streams, got["trainer"], got[against], against, checks)


def _compare(
    streams: int, ours: list[Burst], theirs: list[Burst], against: str, checks: Checks
) -> None:
    median: Callable[[list[float]], float] = statistics.median
    ours_ttft, their_ttft = median([b.ttft for b in ours]), median([b.ttft for b in theirs])
    added_ms = (ours_ttft - their_ttft) * 1000
    ttft_ratio = ours_ttft / their_ttft
    tps_ratio = median([b.tokens_per_second for b in ours]) / median(
        [b.tokens_per_second for b in theirs]
    )
    ttft_met = ttft_ratio <= 1.05 and added_ms <= 10
    tps_met = tps_ratio >= 0.95
    print(
        f"  time to first token, trainer / {against}: {ttft_ratio:.3f} ({added_ms:+.1f} ms); "
        f"goal: the trainer adds at most 5% and 10 ms: {'met' if ttft_met else 'not met'}"
    )
    print(
        f"  output tokens/s, trainer / {against}: {tps_ratio:.3f}; goal >= 0.95: "
        f"{'met' if tps_met else 'not met'}"
    )
    if not checks.smoke:
        return
    checks.check(
        ttft_met,
        f"{streams} stream(s): time to first token, trainer / {against} {ttft_ratio:.3f} "
        f"({added_ms:+.1f} ms; goal: at most 1.05 and +10 ms)",
    )
    checks.check(
        tps_met,
        f"{streams} stream(s): output tokens/s, trainer / {against} {tps_ratio:.3f} "
        "(goal: at least 0.95)",
    )


if __name__ == "__main__":
    main()
