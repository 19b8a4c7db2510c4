"""What both job entry points check and do before anything else: the training job's
(`engines.job`) and a task's (`engines.tasks.job`). Each takes one argument, its spec file, and
finds a one-time bootstrap credential in the environment; without either it says why on stderr
and exits with `USAGE`, since without its token a job cannot report anything, not even its
failure.

`exchange` trades the bootstrap credential, once, for the job's token and the store's
credentials (``POST /v1/jobs/bootstrap``): the token stays in the job's memory, the store's
credentials go into its own environment (which its children, verl's workers, inherit), and
neither is written anywhere. What the backend recorded of the launch (Ray's logs, a launch file)
holds only the spent bootstrap credential."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

import httpx

from akka_training.engines.logs import configure_logging
from akka_training.engines.reporter import ReportNotDelivered, deliver

# The exit status of a job started with unusable arguments.
USAGE = 2
# How long the exchange waits for a service that does not answer (it may be restarting).
EXCHANGE_PATIENCE = 120.0


@dataclass(frozen=True)
class Entry:
    spec_json: str  # the spec file's text
    bootstrap: str  # the one-time credential the job exchanges for its token
    bootstrap_env: str  # the environment variable that held it


def read_entry(
    argv: list[str] | None, module: str, spec_name: str, bootstrap_env: str, what: str
) -> Entry | None:
    """The spec and bootstrap credential of the job `python -m <module> <spec_name>` started
    (`argv`: the arguments, else the command line's); None, after saying why on stderr, when
    either is missing. `what` names the job in that sentence (the job, the task). Sets up
    logging."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print(f"usage: python -m {module} {spec_name}", file=sys.stderr)
        return None
    configure_logging()
    bootstrap = os.environ.get(bootstrap_env, "").strip()
    if not bootstrap:
        print(f"{bootstrap_env} is not set: {what} cannot report to the service", file=sys.stderr)
        return None
    return Entry(
        spec_json=Path(args[0]).read_text(), bootstrap=bootstrap, bootstrap_env=bootstrap_env
    )


def exchange(entry: Entry, trainer_url: str, what: str) -> str | int:
    """The job's token, from the service that `trainer_url` reaches, for `entry`'s bootstrap
    credential; the store's credentials the answer holds go into this process's environment.
    Or the status the job exits with, after saying why on stderr: 0 when its attempt or task
    has ended meanwhile (nothing is left to do), else `USAGE` (the service refused it)."""
    with httpx.Client(
        headers={"Authorization": f"Bearer {entry.bootstrap}"}, timeout=30.0
    ) as client:
        try:
            response = deliver(
                client,
                trainer_url.rstrip("/") + "/v1/jobs/bootstrap",
                "bootstrap",
                {},
                EXCHANGE_PATIENCE,
            )
        except ReportNotDelivered as exc:
            print(f"{what} got no credentials: {exc}", file=sys.stderr)
            return USAGE
    if response.status_code == 409:
        print(f"{what} has nothing to do: {_message(response)}", file=sys.stderr)
        return 0
    answer = response.json()
    os.environ.pop(entry.bootstrap_env, None)
    os.environ.update({str(k): str(v) for k, v in answer["env"].items()})
    token: str = answer["token"]
    return token


def _message(response: httpx.Response) -> str:
    try:
        return str(response.json()["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return response.text[:500]
