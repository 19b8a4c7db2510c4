"""Engine overhead: the same SFT and GRPO configuration run through the trainer (plan -> job ->
reports, telemetry, rollouts kept) and as a bare TRL script (`bench/bare_trl.py`) on the same
tiny model, on this machine. Each side runs `--repeats` times (at least three), alternating
(trainer first, then bare first, and so on), so that a noisy moment falls on both. For each
figure the benchmark prints the median over the repeats with its spread (min-max), its goal, and
"met" or "not met" (the median counts):

- step time, trainer / bare, for SFT and for GRPO (the median interval between step ends, the
  first two steps left out): goal <= 1.05 (ahead: <= 1.02);
- job start to first step, trainer - bare (trainer: from the run's creation on a free pool to
  its first step's end, through the controller, the launch and the job's setup; bare: from
  starting the script's process to its first step's end): goal <= 1 s;
- peak RSS of the training process, trainer / bare (shown, no goal).

    python bench/engine_overhead.py [--sft-steps 40] [--grpo-steps 16] [--repeats 3]
    python bench/engine_overhead.py --bare-against-bare [--repeats 3]

`--bare-against-bare` pairs the bare script with itself in the same way: the spread of those
ratios is the host's own noise, the margin under which no trainer ratio can be told from 1.

Where the time went (py-spy on the job process of a 600-step SFT run, 15 s at 200 Hz): before,
the training thread spent about 10% of its time in `HttpReporter.refresh_action`, the
heartbeat each step's end sent to the service and waited for, so that a pause asked for during
the step saves at its end; everything else the step hooks do (the step's figures, the host
memory through /proc, the OTel instruments and spans, queueing the step report and the
metrics.jsonl and TensorBoard lines, which other threads send and write) took about 2%. Now
the reporter's own thread asks for the directive shortly before the step is expected to end
(`HttpReporter.step_began`), and the step's end takes the answer already there
(`HttpReporter.step_ended`). In GRPO the hooks, the reward scoring hand-off and the rollout
step file took under 2% of the training thread; generation and the update are TRL's.

What the rest of the gap was (py-spy on the job and on the service during a 1,500-step SFT run,
this 2-core machine, 2026-12-03): the training thread itself does the same work as the bare
script, but its base `Linear.forward` matmuls took 30% of its samples against 11% bare. Torch
splits each matmul over both cores, so anything else that runs stalls it: the service (20-25%
of a core: a quarter of it the controller's passes at this benchmark's then 0.2 s interval,
the rest the step report and the directive question each step sent, about 8 ms of service CPU
each) and the job's own reporting threads (about 20% of a core). The bare script alone took
0.0447 s a step and 0.0624 s (1.40x) beside a process that kept 45% of one core busy.

What changed then (2026-12-04): a GRPO step sent three requests (its step report, its rollouts
report, the directive question) and the job wrote a TensorBoard event per figure (about forty a
step, each opening the event file and checksummed in Python). Now step, rollout and snapshot
reports go at most every `trainer.controller.report-seconds` (0.5 s) as one `batch` request,
which is also the directive question, and TensorBoard gets one event per step. Measured with
psutil over 200 GRPO steps: the service used 1.86 s of CPU in 36.9 s (5% of a core; 1.4% idle),
and the job 57.3 s against the bare script's 51.4 s (of which TRL's own work is the same: the
py-spy profiles of both training threads match function for function; the rest is the matmuls
running slower beside other work). What is left beside the training thread: the service's
controller pass (about 9 ms of CPU every 0.5 s with one run) and its answers to two batches a
second; in the job, the rollout step files (a Parquet write and an fsync a step), the
TensorBoard writer, the reward scorer threads. Each takes a few percent of one core, and on
this 2-core machine each percent of a core costs the step about as much again. Medians of the
ratios here went from 1.14 to 1.07-1.11 (SFT) and from 1.30 to 1.06-1.19 (GRPO) over four runs
of this benchmark on a quiet machine; on a GPU node the service runs elsewhere and a step waits
for the device, not for the host's cores.

What changed then (2026-12-05). Per-thread CPU (psutil) over the steady steps of a 200-step
GRPO run put the service at 5% of a core (its controller 1.6%, report handling and the
`runs wait` stream 2.4%, its event loop 0.9%) and the job's own threads at 3-4% (the step
files 2.2%). A bare TRL script beside an idle service (no run) was 4% slower than alone (median
of four alternating pairs), and no slower (0.98) beside one whose controller passed every 5 s: the
passes every 0.5 s, each a dozen statements, preempt one of the two threads every matmul
waits for, so they cost the step about twice their CPU. Now the controller passes every
`trainer.controller.steady-seconds` (2 s) while it has nothing to move (every open run trains
with a live job), and is woken at once by requests and end reports as before. A batch of
reports is taken with one read of the rows it may replace and one flush (it flushed, deleted
and looked up once a report: 10 -> 6 ms a batch of three steps, client and service in one
process), and a step file is built in memory and stored with one write (pyarrow's path
handling took 1.5 of the 2.5 ms a 32-rollout file cost). After: the service 2.7% of a core,
its controller 0.4%. This benchmark then printed 1.047 (SFT) and 1.033 (GRPO) with three
repeats, and 1.08-1.13 (SFT) and 1.12-1.20 (GRPO) in two runs with five, whose spreads (up
to 0.85-1.85 for one pair) show the host's own noise: on this shared 2-core machine one
benchmark run does not settle a 5% goal either way.

What changed then (2026-12-05, later). Per-thread CPU (psutil, 15 s of steady steps) in a
40-steps-a-second SFT run: the job's sinks thread and TensorBoard's writer thread woke at every
step (0.8% and 0.6% of a core); they now wake once for the steps that end within half a second
(0.3% each). The `runs wait` stream's look every 0.5 s cost the service 0.7% of a core (2.5%
with it, 1.8-1.9% without), and the step reports every 0.5 s about 0.6%: the stream now looks
once a second and `trainer.controller.report-seconds` is 1 s by default. After: the service
1.6-1.7% of a core, the job's own threads 1.0% (SFT) and 4.0% (GRPO, of which the step files
2.3%: pyarrow's table and Parquet write about 1.3 ms a 32-rollout file, the store's write and
sync 0.25 ms). `--bare-against-bare --repeats 5` printed medians of 0.975 and 0.979 in one
run, 0.988 and 1.113 in another, with single pairs from 0.73 to 1.29: the bare script against
itself moves as far as the goal's margin, so on this host one run of this benchmark neither
meets nor misses 1.05 by its median alone.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from akka_training.testing.service import TrainerProcess

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "examples" / "data"


GOAL_RATIO = 1.05
AHEAD_RATIO = 1.02
GOAL_START_S = 1.0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sft-steps", type=int, default=40)
    parser.add_argument("--grpo-steps", type=int, default=16)
    parser.add_argument(
        "--repeats", type=int, default=3, help="Runs of each side, alternating (at least 3)."
    )
    parser.add_argument(
        "--bare-against-bare",
        action="store_true",
        help="Run the bare script against itself, paired as above: the ratios this host's own "
        "noise gives, with no trainer at all.",
    )
    args = parser.parse_args()
    if args.repeats < 3:
        parser.error("--repeats must be at least 3: one noisy run must not decide a figure")
    models = REPO / ".cache" / "devmodels"
    subprocess.run(
        [sys.executable, "-m", "akka_training.devmodels", "build", str(models)],
        check=True,
        capture_output=True,
    )
    model_dir = str(models / "tiny-chat")
    if args.bare_against_bare:
        _bare_against_bare(model_dir, args.sft_steps, args.grpo_steps, args.repeats)
        return
    # method -> [(trainer, bare)] per repeat
    results: dict[str, list[tuple[dict[str, float], dict[str, float]]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        trainer = TrainerProcess(
            Path(tmp),
            # A deployment's defaults (the controller's pass every 0.5 s, step reports at most
            # every 0.5 s): what a user's runs cost.
            {"trainer": {"dev-models-dir": str(models)}},
        ).start()
        try:
            trainer.cli("training", "projects", "create", "bench")
            trainer.cli(
                "training",
                "datasets",
                "register",
                "bench/arithmetic",
                "-f",
                str(DATA / "arithmetic.jsonl"),
            )
            trainer.cli(
                "training",
                "datasets",
                "register",
                "bench/prompts",
                "-f",
                str(DATA / "arithmetic-prompts.jsonl"),
            )
            for method, steps, data in _methods(args.sft_steps, args.grpo_steps):
                runs = results.setdefault(method, [])
                for repeat in range(args.repeats):
                    if repeat % 2 == 0:
                        ours = _through_service(trainer, method, steps)
                        bare = _bare(method, model_dir, str(DATA / data), steps)
                    else:
                        bare = _bare(method, model_dir, str(DATA / data), steps)
                        ours = _through_service(trainer, method, steps)
                    runs.append((ours, bare))
                    print(
                        f"{method} run {repeat + 1}: trainer {ours['step']:.4f} s/step, "
                        f"start {ours['start']:.2f} s; bare {bare['step']:.4f} s/step, "
                        f"start {bare['start']:.2f} s",
                        flush=True,
                    )
        finally:
            trainer.close()
    print()
    print(f"{'figure':<42} {'median':>8} {'min-max':>17}  {'goal':<12} result")
    for method, runs in results.items():
        ratios = [ours["step"] / bare["step"] for ours, bare in runs]
        _figure(f"{method} step time, trainer / bare", ratios, GOAL_RATIO, "x")
    starts = [ours["start"] - bare["start"] for runs in results.values() for ours, bare in runs]
    _figure("job start to first step, trainer - bare", starts, GOAL_START_S, "s")
    for method, runs in results.items():
        rss = [ours["rss"] / bare["rss"] for ours, bare in runs if ours["rss"] and bare["rss"]]
        if rss:
            _figure(f"{method} peak RSS, trainer / bare", rss, None, "x")
    print(f"(ahead: step time ratios <= {AHEAD_RATIO})")
    for method, runs in results.items():
        own = statistics.median(ours["own"] for ours, _ in runs)
        print(f"{method}: the job's own measure of its steps (between its step hooks): {own:.4f} s")


def _methods(sft_steps: int, grpo_steps: int) -> list[tuple[str, int, str]]:
    """Each method the benchmark runs: its step count and its dataset under examples/data."""
    return [
        ("sft", sft_steps, "arithmetic.jsonl"),
        ("grpo", grpo_steps, "arithmetic-prompts.jsonl"),
    ]


def _bare_against_bare(model_dir: str, sft_steps: int, grpo_steps: int, repeats: int) -> None:
    """The bare script against itself, in the pairs the benchmark runs: a ratio away from 1.00
    here is the host's noise, and a trainer ratio within this spread is not told apart from it."""
    print(f"{'figure':<42} {'median':>8} {'min-max':>17}")
    for method, steps, data in _methods(sft_steps, grpo_steps):
        ratios = []
        for _ in range(repeats):
            first = _bare(method, model_dir, str(DATA / data), steps)
            second = _bare(method, model_dir, str(DATA / data), steps)
            ratios.append(second["step"] / first["step"])
        _figure(f"{method} step time, bare / bare", ratios, None, "x")


def _figure(name: str, values: list[float], goal: float | None, unit: str) -> None:
    median = statistics.median(values)
    spread = f"{min(values):.3f}-{max(values):.3f}"
    if goal is None:
        print(f"{name:<42} {median:>8.3f} {spread:>17}  {'-':<12} -")
        return
    result = "met" if median <= goal else "not met"
    print(f"{name:<42} {median:>8.3f} {spread:>17}  {'<= ' + f'{goal:g} {unit}':<12} {result}")


def _plan(method: str, steps: int) -> dict[str, Any]:
    config: dict[str, Any] = {"method": method, "maxSeqLength": 128}
    if method == "sft":
        config |= {
            "dataset": "bench/arithmetic",
            "hyperparams": {
                "lora": {"rank": 16, "alpha": 32},
                "optimizer": {"learningRate": 5e-3},
                "training": {"maxSteps": steps, "batchSize": 16},
            },
        }
    else:
        config |= {
            "dataset": "bench/prompts",
            "rlHyperparams": {
                "promptsPerStep": 4,
                "generationsPerPrompt": 8,
                "maxCompletionTokens": 8,
                "lora": {"rank": 16, "alpha": 32},
                "optimizer": {"learningRate": 2e-3},
                "training": {"maxSteps": steps},
            },
            "reward": {
                "terms": [
                    {"name": "format", "kind": "regex", "weight": 0.5, "pattern": "^#### [0-9]+$"},
                    {"name": "correct", "kind": "match", "mode": "final-number"},
                ]
            },
        }
    # One snapshot at the end only, as the bare script saves nothing in between.
    return {
        "kind": "run",
        "project": "bench",
        "baseModel": "tiny-chat",
        "config": config,
        "execution": {"saveEvery": steps + 1},
    }


def _through_service(trainer: TrainerProcess, method: str, steps: int) -> dict[str, float]:
    path = trainer.home / f"{method}.yaml"
    path.write_text(yaml.safe_dump(_plan(method, steps)))
    _wait_for_free_devices(trainer)
    run = trainer.cli_json("training", "runs", "start", "-f", str(path))["id"]
    trainer.cli("training", "runs", "wait", run, "--exit-status", timeout=1800)
    metrics = trainer.cli_json("training", "runs", "metrics", run)["steps"]
    got = trainer.cli_json("training", "runs", "get", run)
    created = datetime.fromisoformat(got.get("createdAt") or got["created_at"]).timestamp()
    ends = [datetime.fromisoformat(s["at"]).timestamp() for s in metrics]
    peak = max(s.get("memory/host_peak", 0) for s in metrics)
    own = statistics.median(s["timing/step"] for s in metrics[2:])
    return {"step": _median_interval(ends), "rss": peak, "own": own, "start": ends[0] - created}


def _wait_for_free_devices(trainer: TrainerProcess, timeout: float = 120.0) -> None:
    """The previous run's job holds its device until its process has exited (after the run is
    COMPLETED): start the next run on a free pool, so its start is not that wait."""
    client = trainer.client()
    deadline = time.monotonic() + timeout
    while client.capacity().claims and time.monotonic() < deadline:
        time.sleep(0.05)


def _bare(method: str, model_dir: str, data: str, steps: int) -> dict[str, float]:
    began = time.time()
    out = subprocess.run(
        [
            sys.executable,
            str(Path(__file__).with_name("bare_trl.py")),
            method,
            model_dir,
            data,
            str(steps),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    return {
        "step": _median_interval(result["ends"]),
        "rss": result["peak_rss"],
        "start": result["first_wall"] - began,
    }


def _median_interval(ends: list[float]) -> float:
    # The first steps warm up (allocations, compilation of kernels): leave them out.
    gaps = [b - a for a, b in itertools.pairwise(ends)][2:]
    return statistics.median(gaps)


if __name__ == "__main__":
    start = time.monotonic()
    main()
    print(f"({time.monotonic() - start:.0f} s)")
