"""The CLI answers at once: `akka --help` (goal <= 0.2 s) and `akka training runs list` against
a live trainer holding 100 runs (goal <= 0.3 s), each the median wall time of a fresh `akka`
process (the installed entry point when it is on PATH, else `python -m akka_training.cli`).
Also printed: the median CPU time of the same processes (less sensitive to a busy machine) and
the service time of one `GET /v1/runs` with those runs, read in this process.

    python bench/cli.py [--repeats 15] [--runs 100]

Where the time went (`python -X importtime -m akka_training.cli training runs list`, py-spy
and A/B runs of fresh processes, alternating the two versions, on a 2-core machine another
benchmark kept busy; CPU seconds, which a busy machine changes less than wall time). Mind that
`-X importtime` lists no module imported through `importlib.import_module`: the lazy groups
and the API's nouns are missing from it, though what they import is there.

- Python itself starts in about 0.02 s; `typer` (its vendored click and parameter types) takes
  about 0.05 s and is needed for any command line.
- The CLI used to import every command module at start (`auth`, `config`, `trainer` and each
  noun of `training`), and with them PyYAML (`cli/output.py`, `client/contexts.py`): about
  0.05 s, and 0.03 s more to convert every typer group into click commands. Now the root and
  `akka training` are lazy groups (`cli/lazy.py`): a help page lists the groups from their
  names and help, and a command line imports only the group it names.
- Rendering a help page imports `typer.rich_utils`, which imports rich's console, tables and
  panels, and also `rich.markdown` (markdown-it) and `rich.traceback` (rich.pretty, attrs):
  about 0.06 s that typer asks for and the CLI cannot avoid without its own help renderer.
- `akka training runs list` with 100 runs took 0.43 to 0.47 s (the bench printed 0.441 s
  wall, 0.426 s CPU), spent on:
  - with NO_COLOR (or --no-color; the bench's trainer environment sets it) every command
    imported `typer.rich_utils` just to set its COLOR_SYSTEM: about 0.05 s. The setting is now
    made when typer imports the module to render a help page (`cli.lazy.when_imported`).
  - httpx imports its own command line (`httpx._main`) when it can, and with it click,
    pygments and rich's progress bars and syntax: about 0.04 s. The CLI imports httpx with
    that import made to fail once (`cli.state.import_httpx`), as httpx allows.
  - `httpx.Client()` read certifi's CA bundle (`load_verify_locations`): about 0.04 s, for a
    trainer reached over plain http as well. The client's TLS context is now built by the
    first https connection (`client/tls.py`, httpx's own `verify=True` context).
  - rich: its import (about 0.03 s) and its layout of 800 cells (about 0.04 s). A table of
    plain cells that fits is now written by `cli.output.plain_lines`, the same text (a test
    compares both on random grids, for pipes and terminals); other tables still go to rich.
  - pydantic (about 0.045 s; typer's parameter conversion imports it in any case) and every
    model of the API: the client imported all nouns' models, with `core.tasks`,
    `core.evaluations` and `core.plans` under them, about 0.045 s for one model read. The
    client now names its answers `api.runs.RunSummary` and so on, and `akka_training.api`
    imports a noun's module when first reached (0.035 s less); `api.runs` re-exports
    `RunPlan` on demand (0.008 s less).
  - pydantic's lookup of plugins in the entry points of every installed distribution (about
    190 here) when it built the first validator: 0.01 to 0.02 s. The CLI turns plugins off
    while it validates the trainer's answers, as typer does for the command line.
  - what stays: the request (the service answers in about 0.012 s), building the validator of
    `list[RunSummary]` (about 0.01 s) and validating the rows (under 1 ms), httpx and httpcore
    (about 0.035 s), PyYAML for the contexts file (about 0.012 s, 8 ms of it the regular
    expression its reader compiles), the CLI's own modules (about 0.015 s) and the imports
    pydantic makes for its validators (`importlib.metadata`, about 0.01 s).
- Now `runs list` takes about 0.23 to 0.25 s CPU, on a pipe or a terminal; `akka --help` is
  unchanged.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.integration.helpers import (  # noqa: E402
    ensure_project,
    register_dataset,
    scripted_settings,
    sft_plan,
)

from akka_training.testing.service import TrainerProcess  # noqa: E402

HELP_GOAL = 0.2
LIST_GOAL = 0.3


def akka_command() -> list[str]:
    found = shutil.which("akka")
    return [found] if found else [sys.executable, "-m", "akka_training.cli"]


def timed(args: list[str], env: dict[str, str], repeats: int) -> tuple[float, float]:
    """Median wall and CPU seconds of `args` run `repeats` times (after one warm-up run)."""
    walls: list[float] = []
    cpus: list[float] = []
    subprocess.run(args, env=env, capture_output=True, check=True)
    for _ in range(repeats):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run(args, env=env, stdout=subprocess.DEVNULL, check=True)
        walls.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    return statistics.median(walls), statistics.median(cpus)


def report(name: str, wall: float, cpu: float, goal: float) -> None:
    verdict = "met" if wall <= goal else "not met"
    print(f"{name}: {wall:.3f} s median wall ({cpu:.3f} s CPU), goal <= {goal} s: {verdict}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--runs", type=int, default=100)
    args = parser.parse_args()
    akka = akka_command()
    env = {k: v for k, v in os.environ.items() if k not in ("TRAINER_URL", "AKKA_CONTEXT")}
    wall, cpu = timed([*akka, "--help"], env, args.repeats)
    report("akka --help", wall, cpu, HELP_GOAL)

    with tempfile.TemporaryDirectory() as tmp:
        trainer = TrainerProcess(Path(tmp), scripted_settings()).start()
        try:
            ensure_project(trainer, "bench")
            register_dataset(trainer, "bench/chat")
            client = trainer.client()
            plan = sft_plan("bench", "bench/chat", steps=2)
            for _ in range(args.runs):
                client.start_run(plan)
            listed = client.runs(limit=args.runs)
            assert len(listed) == args.runs, len(listed)
            service = []
            for _ in range(args.repeats):
                start = time.perf_counter()
                client.runs(limit=args.runs)
                service.append(time.perf_counter() - start)
            print(
                f"GET /v1/runs with {args.runs} runs (client call, in process): "
                f"{statistics.median(service) * 1000:.1f} ms median"
            )
            client.close()
            list_env = {**trainer.env, **{"AKKA_ACCESS_TOKEN": trainer.admin_token}}
            list_env["TRAINER_URL"] = trainer.url
            wall, cpu = timed([*akka, "training", "runs", "list"], list_env, args.repeats)
            report(f"akka training runs list ({args.runs} runs)", wall, cpu, LIST_GOAL)
        finally:
            trainer.close()


if __name__ == "__main__":
    main()
