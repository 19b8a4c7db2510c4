"""Benchmark: the worst 10 rollouts of a 10,000-rollout step, through the service and the CLI.

Starts a real trainer, trains a one-step GRPO run on the tiny model so the run has a kept step,
then puts a step file of `--rollouts` rollouts (written by the job's own writer,
`write_step_file`, with the rollouts of `bench/rollouts.py`) in that step's place in the blob
store and its count and extremes in the database, as the job's report would. Prints:

- the service time of ``GET /v1/runs/RUN/rollouts?step=1&order=worst&limit=10`` over
  `--requests` requests on one connection (median, p95; goal: at most 50 ms);
- the wall time of ``akka training runs rollouts RUN --step 1 --worst 10`` (median of `--cli`
  runs; goal: at most 0.4 s).

Run: ``PYTHONPATH=src python bench/worst_rollouts.py``.
"""

from __future__ import annotations

import argparse
import random
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import yaml

sys.path.insert(0, str(Path(__file__).parent))
from rollouts import make_step, p95

from akka_training.rewards.rollouts import step_summary, write_step_file
from akka_training.testing.service import TrainerProcess

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "examples" / "data"
SERVICE_GOAL = 0.050
CLI_GOAL = 0.4


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rollouts", type=int, default=10_000)
    parser.add_argument("--requests", type=int, default=100)
    parser.add_argument("--cli", type=int, default=10, help="CLI runs timed")
    args = parser.parse_args()
    models = REPO / ".cache" / "devmodels"
    subprocess.run(
        [sys.executable, "-m", "akka_training.devmodels", "build", str(models)],
        check=True,
        capture_output=True,
    )
    with tempfile.TemporaryDirectory() as tmp:
        trainer = TrainerProcess(
            Path(tmp),
            {"trainer": {"dev-models-dir": str(models), "controller": {"interval-seconds": 0.2}}},
        ).start()
        try:
            run = _one_step_run(trainer)
            _replace_step(trainer, run, args.rollouts)
            service = _service_times(trainer, run, args.requests)
            cli = _cli_times(trainer, run, args.cli)
        finally:
            trainer.close()
    median = statistics.median(service)
    print(f"worst 10 of a {args.rollouts:,}-rollout step")
    print(
        f"service: median {median * 1000:.1f} ms, p95 {p95(service) * 1000:.1f} ms over "
        f"{len(service)} requests (goal <= {SERVICE_GOAL * 1000:.0f} ms): "
        f"{'met' if median <= SERVICE_GOAL else 'not met'}"
    )
    wall = statistics.median(cli)
    print(
        f"CLI `runs rollouts RUN --step 1 --worst 10`: median {wall:.3f} s, max {max(cli):.3f} s "
        f"over {len(cli)} runs (goal <= {CLI_GOAL} s): {'met' if wall <= CLI_GOAL else 'not met'}"
    )


def _one_step_run(trainer: TrainerProcess) -> str:
    trainer.cli("training", "projects", "create", "bench")
    prompts = str(DATA / "arithmetic-prompts.jsonl")
    trainer.cli("training", "datasets", "register", "bench/prompts", "-f", prompts)
    plan = {
        "kind": "run",
        "project": "bench",
        "baseModel": "tiny-chat",
        "config": {
            "method": "grpo",
            "maxSeqLength": 128,
            "dataset": "bench/prompts",
            "rlHyperparams": {
                "promptsPerStep": 2,
                "generationsPerPrompt": 4,
                "maxCompletionTokens": 8,
                "lora": {"rank": 4},
                "training": {"maxSteps": 1},
            },
            "reward": {"terms": [{"name": "correct", "kind": "match", "mode": "final-number"}]},
        },
    }
    path = trainer.home / "grpo.yaml"
    path.write_text(yaml.safe_dump(plan))
    run: str = trainer.cli_json("training", "runs", "start", "-f", str(path))["id"]
    trainer.cli("training", "runs", "wait", run, "--exit-status", timeout=600)
    return run


def _replace_step(trainer: TrainerProcess, run: str, count: int) -> None:
    """Step 1's file and row replaced by a `count`-rollout step, as the job would keep it."""
    databases = list(trainer.home.rglob("*.db")) + list(trainer.home.rglob("*.sqlite"))
    assert len(databases) == 1, databases
    with sqlite3.connect(databases[0]) as db:
        (blob,) = db.execute(
            "SELECT blob FROM rollout_steps WHERE run_id = ? AND step = 1", (run,)
        ).fetchone()
    files = [p for p in trainer.home.rglob(Path(blob).name) if p.as_posix().endswith(blob)]
    assert len(files) == 1, files
    rollouts = make_step(random.Random(0), 1, count)
    write_step_file(rollouts, files[0])
    summary = step_summary(rollouts)
    with sqlite3.connect(databases[0]) as db:
        db.execute(
            "UPDATE rollout_steps SET count = ?, best_score = ?, worst_score = ? "
            "WHERE run_id = ? AND step = 1",
            (summary.count, summary.best, summary.worst, run),
        )


def _service_times(trainer: TrainerProcess, run: str, requests: int) -> list[float]:
    token = trainer.admin_token
    times = []
    with httpx.Client(base_url=trainer.url, headers={"Authorization": f"Bearer {token}"}) as client:
        params = {"step": 1, "order": "worst", "limit": 10}
        for attempt in range(requests + 3):  # the first few warm the service up
            began = time.perf_counter()
            answer = client.get(f"/v1/runs/{run}/rollouts", params=params)
            took = time.perf_counter() - began
            answer.raise_for_status()
            body = answer.json()
            assert len(body["rollouts"]) == 10 and body["count"] > 10, body["count"]
            if attempt >= 3:
                times.append(took)
    return times


def _cli_times(trainer: TrainerProcess, run: str, count: int) -> list[float]:
    times = []
    for _ in range(count):
        began = time.perf_counter()
        trainer.cli("training", "runs", "rollouts", run, "--step", "1", "--worst", "10")
        times.append(time.perf_counter() - began)
    return times


if __name__ == "__main__":
    main()
