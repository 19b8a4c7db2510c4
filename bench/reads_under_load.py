"""Reads under load: 2,000 `GET /v1/runs/{id}` (what `akka training runs get` sends) with 50 in
flight against a real trainer process while one of its runs trains (the scripted job: a real
child process reporting a step every 0.2 s, its heartbeats and snapshots), with a few hundred
other runs queued behind it. Prints the latency percentiles (goal: p99 <= 0.5 s).

    python bench/reads_under_load.py [--requests 2000] [--in-flight 50] [--queued 300]
        [--database-url postgresql://127.0.0.1:5432/test] [--profile py-spy.txt]

`--profile FILE` records the trainer process with py-spy while the reads run (py-spy's
`--format raw`, collapsed stacks; `--gil` only the thread holding the GIL). The figures also
give the service's and this client's CPU time, as both share the machine.

Where the time went before (py-spy on the trainer; p50 0.9 s, p99 2-3 s, about 50 reads a
second on two shared cores):
- the controller's pass held the GIL for about 38% of the samples: every 0.2 s it read each
  of the 300 queued runs in a transaction of its own, four statements a run (now one statement
  per table for all of them, `controller.apply.load_views`; see bench/controller_pass.py);
- on SQLite the service had SQLAlchemy's default pool, 5 connections kept and 10 more opened and
  closed again, for 40 worker threads: request threads waited in `QueuePool._do_get`, and many
  requests opened a connection and set it up (its pragmas) and closed it again. The pool is now
  `trainer.database.pool-size` (the worker threads plus 4), as on Postgres;
- the rest was the framework's dispatch (route matching, dependencies, the hand-offs to worker
  threads: about 40% of the GIL time together) and SQL execution. Building the run's answer
  (`run_views`: the cost's granted claim, a queued run's position) and validating and
  serialising `RunRecord` were a few percent each; the token's hash and `last_used_at` (written
  once a minute) were not visible. About 3.4 ms of the service's CPU a read, before and after.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
from scripted_runs import CATALOG, ROWS, sft_plan  # bench/scripted_runs.py

from akka_training.testing.service import TrainerProcess

REPO = Path(__file__).resolve().parents[1]
GOAL_P99 = 0.5


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--in-flight", type=int, default=50)
    parser.add_argument(
        "--queued", type=int, default=300, help="Runs queued behind the one training."
    )
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--profile", type=Path, default=None, help="py-spy the trainer into FILE.")
    parser.add_argument(
        "--gil", action="store_true", help="With --profile: only the thread holding the GIL."
    )
    args = parser.parse_args()

    settings: dict[str, Any] = {
        "trainer": {
            "catalog": CATALOG,
            "testing": {"scripted-jobs": True},
            "controller": {"interval-seconds": 0.2, "retry-base-seconds": 0.2},
            "local": {"stop-grace-seconds": 5},
            "pools": [{"name": "default", "accelerator": "cpu", "devices": 1}],
        }
    }
    if args.database_url:
        settings["trainer"]["database"] = {"url": args.database_url}
    with tempfile.TemporaryDirectory() as tmp:
        trainer = TrainerProcess(
            Path(tmp), settings, env={"AKKA_SCRIPTED_STEP_SECONDS": "0.2"}
        ).start()
        try:
            result = _measure(trainer, args)
        finally:
            trainer.close()
    latencies = sorted(result["latencies"])
    p50 = _percentile(latencies, 50)
    p99 = _percentile(latencies, 99)
    print(
        f"{len(latencies)} GET /v1/runs/{{id}}, {args.in_flight} in flight, one run training "
        f"(steps {result['steps'][0]} -> {result['steps'][1]} meanwhile), {args.queued} queued"
    )
    print(
        f"p50 {p50:.3f} s  p90 {_percentile(latencies, 90):.3f} s  p99 {p99:.3f} s  "
        f"max {latencies[-1]:.3f} s  mean {statistics.mean(latencies):.3f} s  "
        f"throughput {len(latencies) / result['wall']:.0f} req/s"
    )
    print(
        f"CPU while reading: the service {result['service_cpu']:.1f} s "
        f"({1000 * result['service_cpu'] / len(latencies):.1f} ms a request), this client "
        f"{result['client_cpu']:.1f} s, over {result['wall']:.1f} s"
    )
    print(f"statuses: {result['statuses']}")
    print(f"goal: p99 <= {GOAL_P99} s: {'met' if p99 <= GOAL_P99 else 'not met'}")


def _measure(trainer: TrainerProcess, args: argparse.Namespace) -> dict[str, Any]:
    trainer.cli("training", "projects", "create", "bench")
    data = trainer.home / "train.jsonl"
    data.write_text(ROWS)
    trainer.cli("training", "datasets", "register", "bench/train", "-f", str(data))
    headers = {"Authorization": f"Bearer {trainer.admin_token}"}
    with httpx.Client(base_url=trainer.url, headers=headers, timeout=120) as http:
        running = _submit(http, sft_plan(100_000, "training"))
        for i in range(args.queued):
            _submit(http, sft_plan(10, f"queued-{i}"))
        deadline = time.monotonic() + 120
        while http.get(f"/v1/runs/{running}").json()["phase"] != "TRAINING":
            if time.monotonic() > deadline:
                raise RuntimeError(f"the run did not start training:\n{trainer.log()[-3000:]}")
            time.sleep(0.2)
        time.sleep(2)  # a few steps, so that the run's answer has what a training run's has
        first_step = http.get(f"/v1/runs/{running}").json()["progress"]["observedStep"]
        targets = [running, running] + [
            r["id"] for r in http.get("/v1/runs", params={"phase": "QUEUED", "limit": 20}).json()
        ]

    profiler = None
    if args.profile is not None:
        assert trainer.proc is not None
        profiler = subprocess.Popen(
            [
                "py-spy", "record", "--pid", str(trainer.proc.pid), "--format", "raw",
                "--rate", "200", "--output", str(args.profile.resolve()),
                *(["--gil"] if args.gil else []),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        time.sleep(1)

    local = threading.local()
    clients: list[httpx.Client] = []
    lock = threading.Lock()

    def read(i: int) -> tuple[float, int]:
        client = getattr(local, "client", None)
        if client is None:
            client = local.client = httpx.Client(base_url=trainer.url, headers=headers, timeout=120)
            with lock:
                clients.append(client)
        # Nine reads in ten of the training run (a user watching it), one of a queued run.
        run = targets[0] if i % 10 else targets[1 + (i // 10) % (len(targets) - 1)]
        began = time.perf_counter()
        status = client.get(f"/v1/runs/{run}").status_code
        return time.perf_counter() - began, status

    assert trainer.proc is not None
    service_cpu = _cpu_seconds(trainer.proc.pid)
    own_cpu = time.process_time()
    began = time.perf_counter()
    with ThreadPoolExecutor(max_workers=args.in_flight) as pool:
        answers = list(pool.map(read, range(args.requests)))
    wall = time.perf_counter() - began
    service_cpu = _cpu_seconds(trainer.proc.pid) - service_cpu
    own_cpu = time.process_time() - own_cpu
    for client in clients:
        client.close()
    if profiler is not None:
        profiler.send_signal(2)
        profiler.wait(timeout=60)
    with httpx.Client(base_url=trainer.url, headers=headers, timeout=120) as http:
        last_step = http.get(f"/v1/runs/{running}").json()["progress"]["observedStep"]
    statuses: dict[int, int] = {}
    for _, status in answers:
        statuses[status] = statuses.get(status, 0) + 1
    return {
        "latencies": [seconds for seconds, _ in answers],
        "statuses": statuses,
        "wall": wall,
        "steps": (first_step, last_step),
        "service_cpu": service_cpu,
        "client_cpu": own_cpu,
    }


def _cpu_seconds(pid: int) -> float:
    """User and system CPU time of process `pid` (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _submit(http: httpx.Client, plan: dict[str, Any]) -> str:
    response = http.post("/v1/runs", json=plan)
    if response.status_code != 200:
        raise RuntimeError(f"{response.status_code} {response.text[:500]}")
    return str(response.json()["id"])


def _percentile(ordered: list[float], pct: float) -> float:
    index = min(len(ordered) - 1, max(0, round(pct / 100 * len(ordered)) - 1))
    return ordered[index]


if __name__ == "__main__":
    start = time.monotonic()
    main()
    print(f"({time.monotonic() - start:.0f} s)")
    sys.exit(0)
