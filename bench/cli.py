"""The CLI answers at once: `akka --help` (goal <= 0.2 s) and `akka training runs list` against
a live trainer holding 100 runs (goal <= 0.3 s), each the median wall time of a fresh `akka`
process (the installed entry point when it is on PATH, else `python -m akka_training.cli`).
Also printed: the median CPU time of the same processes (less sensitive to a busy machine) and
the service time of one `GET /v1/runs` with those runs, read in this process.

    python bench/cli.py [--repeats 15] [--runs 100]

Where the time went (`python -X importtime -c "import akka_training.cli.main"` and
`-X importtime -m akka_training.cli --help`, on a quiet machine):

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
- httpx (about 0.1 s with its dependencies), pydantic and the api models are imported only when
  a command calls the trainer (`cli/state.py`); `runs list` pays them, plus the request, the
  validation of the answer into `RunSummary` models and the table (rich).
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
