"""What both job entry points check before anything else: the training job's
(`engines.job`) and a task's (`engines.tasks.job`). Each takes one argument, its spec file, and
finds its token in the environment; without either it says why on stderr and exits with
`USAGE`, since without its token a job cannot report anything, not even its failure."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from akka_training.engines.logs import configure_logging

# The exit status of a job started with unusable arguments.
USAGE = 2


@dataclass(frozen=True)
class Entry:
    spec_json: str  # the spec file's text
    token: str


def read_entry(
    argv: list[str] | None, module: str, spec_name: str, token_env: str, what: str
) -> Entry | None:
    """The spec and token of the job `python -m <module> <spec_name>` started (`argv`: the
    arguments, else the command line's); None, after saying why on stderr, when either is
    missing. `what` names the job in that sentence (the job, the task). Sets up logging."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print(f"usage: python -m {module} {spec_name}", file=sys.stderr)
        return None
    configure_logging()
    token = os.environ.get(token_env, "").strip()
    if not token:
        print(f"{token_env} is not set: {what} cannot report to the service", file=sys.stderr)
        return None
    return Entry(spec_json=Path(args[0]).read_text(), token=token)
