"""One controller pass with many open runs: the service's real application and controller in
this process, on a real database (SQLite by default, or `--database-url`), with runs submitted
through `POST /v1/runs` (the service's own code path), one of them training (the scripted job, a
child process reporting a step every 0.2 s to the app served on a loopback port) and the rest
queued behind it. Each size's figure is the median of `--passes` passes of `Controller.tick`
(observe the cluster, admit, reconcile every open run, the tasks, the pipelines). Prints the
pass at each size, the cost per run, and whether one pass at 1,000 runs takes 50 ms or less and
grows linearly (per-run cost at the largest size at most 1.5 times that at the smallest).

    python bench/controller_pass.py [--sizes 250,500,1000] [--passes 15]
        [--database-url postgresql://127.0.0.1:5432/test] [--profile]

`--profile` prints where one pass at the largest size spends its time (cProfile, cumulative).

Where the time went before (cProfile of a pass at 1,000 runs on SQLite, two shared cores: about
0.9 s a pass, 0.92 ms a run, linear): every open run was read in a transaction of its own with
three or four statements (the run, its current attempt, its open claim, its ended attempts for
the crash count), so a pass made about 3,000 statements and 1,000 commits; SQLAlchemy's
statement building, compilation and result handling and SQLite's work on them were nearly all
of it, deciding (the phase modules) under 1%. Now the views are read with one statement per
table for every 500 runs (`controller.apply.load_views`), and admission reads the open claims'
columns, not 1,000 ORM objects, loading only the claims it grants. The cluster is asked about
launched attempts only (`Backend.status`, one call each): with most runs queued, few calls.
On Postgres each statement is a round trip, so a pass there is mostly the dozen round trips'
latency, which a loaded machine stretches.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import secrets
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import uvicorn
from scripted_runs import CATALOG, ROWS, sft_plan  # bench/scripted_runs.py

from akka_training.controller.loop import Controller
from akka_training.server.services.pipelines import advance_all
from akka_training.testing.app import InProcessTrainer
from akka_training.testing.service import free_port

GOAL_MS = 50.0
GOAL_SIZE = 1000
LINEAR = 1.5


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="250,500,1000")
    parser.add_argument("--passes", type=int, default=15)
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    sizes = sorted(int(s) for s in args.sizes.split(","))
    port = free_port()
    settings: dict[str, Any] = {
        "trainer": {
            "catalog": CATALOG,
            "listen": {"host": "127.0.0.1", "port": port},
            "pools": [{"name": "default", "accelerator": "cpu", "devices": 1}],
            "controller": {"interval-seconds": 0.2, "retry-base-seconds": 0.2},
        }
    }
    schema = None
    if args.database_url:
        url = args.database_url
        if url.startswith("postgres"):
            # A schema of its own in that database, dropped afterwards.
            schema = "akka_bench_" + secrets.token_hex(4)
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute(f"CREATE SCHEMA {schema}")
            url += ("&" if "?" in url else "?") + f"options=-csearch_path%3D{schema}"
        settings["trainer"]["database"] = {"url": url}
    try:
        _bench(settings, sizes, port, args)
    finally:
        if schema is not None:
            with psycopg.connect(args.database_url, autocommit=True) as conn:
                conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def _bench(settings: dict[str, Any], sizes: list[int], port: int, args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp, InProcessTrainer(Path(tmp), settings) as trainer:
        # The jobs report to the app over loopback, as to `akka trainer serve`; the controller is
        # driven here, pass by pass, rather than by the lifespan's thread.
        server = uvicorn.Server(
            uvicorn.Config(
                trainer.app, host="127.0.0.1", port=port, lifespan="off", log_level="warning"
            )
        )
        serving = threading.Thread(target=server.run, daemon=True)
        serving.start()
        controller = Controller(trainer.ctx)
        controller.hooks.append(lambda: advance_all(trainer.ctx))
        trainer.ctx.controller = controller
        try:
            rows = _measure(trainer, controller, sizes, args)
        finally:
            trainer.ctx.backend.close()
            server.should_exit = True
            serving.join(timeout=10)
            _stop_jobs(Path(tmp))
    print(f"database: {trainer.ctx.db.dialect}; one run training, the rest queued")
    print(f"{'open runs':>9} {'pass ms (median)':>17} {'min':>7} {'max':>7} {'ms per run':>11}")
    for size, times in rows:
        median = statistics.median(times) * 1000
        print(
            f"{size:>9} {median:>17.1f} {min(times) * 1000:>7.1f} {max(times) * 1000:>7.1f} "
            f"{median / size:>11.4f}"
        )
    per_run = [statistics.median(t) / s for s, t in rows]
    at_goal = [statistics.median(t) * 1000 for s, t in rows if s == GOAL_SIZE]
    growth = per_run[-1] / per_run[0]
    print(f"per-run cost at {rows[-1][0]} / at {rows[0][0]}: {growth:.2f}")
    if at_goal:
        met = at_goal[0] <= GOAL_MS and growth <= LINEAR
        print(
            f"goal: one pass at {GOAL_SIZE} open runs <= {GOAL_MS:.0f} ms, growing linearly "
            f"(per-run cost ratio <= {LINEAR}): {'met' if met else 'not met'}"
        )


def _measure(
    trainer: InProcessTrainer, controller: Controller, sizes: list[int], args: argparse.Namespace
) -> list[tuple[int, list[float]]]:
    api = trainer.client()
    _check(api.post("/v1/projects", json={"name": "bench"}))
    _check(
        api.post(
            "/v1/datasets/bench/train",
            content=ROWS.encode(),
            headers={"Content-Type": "application/x-ndjson"},
        )
    )
    _check(api.post("/v1/runs", json=sft_plan(100_000, "training")))
    submitted = 1
    controller.tick()  # admits and launches the first run
    deadline = time.monotonic() + 120
    while _phase(api) != "TRAINING":
        if time.monotonic() > deadline:
            raise RuntimeError("the first run did not start training")
        controller.tick()
        time.sleep(0.2)
    rows = []
    for size in sizes:
        while submitted < size:
            _check(api.post("/v1/runs", json=sft_plan(10, f"queued-{submitted}")))
            submitted += 1
        controller.tick()  # the first pass over new runs
        times = []
        for _ in range(args.passes):
            began = time.perf_counter()
            controller.tick()
            times.append(time.perf_counter() - began)
            time.sleep(0.05)
        rows.append((size, times))
    open_runs = len(_check(api.get("/v1/runs", params={"phase": "open", "limit": 1000})).json())
    if open_runs != min(sizes[-1], 1000) or _phase(api) != "TRAINING":
        raise RuntimeError(f"expected {sizes[-1]} open runs, one training; found {open_runs}")
    if args.profile:
        profile = cProfile.Profile()
        profile.enable()
        controller.tick()
        profile.disable()
        pstats.Stats(profile, stream=sys.stdout).sort_stats("cumulative").print_stats(40)
    return rows


def _phase(api: Any) -> str:
    runs = _check(api.get("/v1/runs", params={"phase": "open", "limit": 1000})).json()
    first = min(runs, key=lambda r: r["createdAt"])
    return str(first["phase"])


def _check(response: Any) -> Any:
    if response.status_code >= 300:
        raise RuntimeError(f"{response.status_code} {response.text[:500]}")
    return response


def _stop_jobs(home: Path) -> None:
    import os
    import signal

    for handle_file in (home / "jobs").glob("*/*/handle.json"):
        try:
            os.killpg(int(json.loads(handle_file.read_text())["pid"]), signal.SIGKILL)
        except (ProcessLookupError, PermissionError, ValueError, KeyError, OSError):
            pass


if __name__ == "__main__":
    start = time.monotonic()
    main()
    print(f"({time.monotonic() - start:.0f} s)")
