"""`akka --help` in CPU seconds (goal <= 0.15 s): the page `cli/main.py` prints itself against
the same page rendered by typer and rich (`cli/root.py`, what every `akka --help` ran before),
and both against a bare Python start. Each figure is the median CPU time (user + system, from
`resource.getrusage` of the children) of fresh processes, alternated so that a busy machine
weighs on all three alike; the ratios are what to compare across machines.

    python bench/root_help.py [--repeats 15]

Measured on a 2-core machine other work kept busy: Python starts in about 0.02 s of CPU; the page
typer renders takes about 0.25 s (typer about 0.07 s, rich's console, tables, markdown and
tracebacks, and the layout); the page written by `cli/roothelp.py` about 0.03 s (ratio 0.10), Python's start and little more.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys

HELP_GOAL = 0.15

COMMANDS = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "akka --help": [sys.executable, "-m", "akka_training.cli", "--help"],
    "akka --help through typer": [
        sys.executable,
        "-c",
        "from akka_training.cli.root import main; main(['--help'])",
    ],
}


def cpu_seconds(args: list[str], env: dict[str, str]) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(args, env=env, stdout=subprocess.DEVNULL, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if k not in ("TRAINER_URL", "AKKA_CONTEXT")}
    samples: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for command in COMMANDS.values():
        subprocess.run(command, env=env, capture_output=True, check=True)  # warm the caches
    for _ in range(args.repeats):
        for name, command in COMMANDS.items():
            samples[name].append(cpu_seconds(command, env))
    median = {name: statistics.median(values) for name, values in samples.items()}
    for name, value in median.items():
        print(f"{name}: {value:.3f} s CPU (median of {args.repeats})")
    bare, fast, typer = (median[name] for name in COMMANDS)
    print(f"akka --help / through typer: {fast / typer:.2f}")
    print(f"akka --help / python -c pass: {fast / bare:.2f}")
    verdict = "met" if fast <= HELP_GOAL else "not met"
    print(f"akka --help: {fast:.3f} s CPU, goal <= {HELP_GOAL} s: {verdict}")


if __name__ == "__main__":
    main()
