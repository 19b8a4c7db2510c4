"""`python -m akka_training.backends.ray.bootstrap --entry MODULE --run RUN --attempt N
[--work-dir DIR]`: the first process of a job on a Ray worker.

It writes the job spec (from ``AKKA_JOB_SPEC``) to ``DIR/RUN/N/job.json`` (``DIR`` defaults to
``$TMPDIR/akka-jobs`` on the worker), moves there, and replaces itself with
``python -m MODULE job.json`` under the same interpreter, so the job keeps the process (and
the pid) that Ray watches and signals. It imports only the standard library, `entrypoint` and
`jobfiles`. The job's directory is locked for the job's life; the job empties it as it ends, and
the next bootstrap on the node removes what killed jobs left (`jobfiles`).

The job does not join the Ray cluster it runs on: Ray gives a job's entrypoint the cluster's
address (``RAY_ADDRESS``) and its job config (which repeats the runtime env, the job's token
among it); both are removed, so a ``ray.init()`` inside the job (verl starts its own Ray with
``address=local``) never takes devices the trainer did not grant.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from akka_training.backends import jobfiles
from akka_training.backends.ray.entrypoint import SPEC_ENV, decode_spec

# What Ray gives a job's entrypoint so that it can join the cluster.
RAY_DRIVER_ENV = ("RAY_ADDRESS", "RAY_JOB_CONFIG_JSON_ENV_VAR")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="akka_training.backends.ray.bootstrap")
    parser.add_argument("--entry", required=True, help="the job's module")
    parser.add_argument("--run", required=True)
    parser.add_argument("--attempt", required=True, type=int)
    parser.add_argument("--work-dir", default=None)
    args = parser.parse_args(argv)
    encoded = os.environ.pop(SPEC_ENV, None)
    if not encoded:
        print(f"akka bootstrap: {SPEC_ENV} is not set; the job has no spec", file=sys.stderr)
        return 2
    spec = decode_spec(encoded)
    for name in RAY_DRIVER_ENV:
        os.environ.pop(name, None)
    root = Path(args.work_dir) if args.work_dir else Path(tempfile.gettempdir()) / "akka-jobs"
    job_dir = root / args.run / str(args.attempt)
    # What jobs on this node left when they were killed (Ray keeps their logs).
    jobfiles.sweep(root, jobfiles.held, keep_logs_seconds=0)
    jobfiles.hold(job_dir)  # for the life of the job: the lock passes through exec
    job_json = job_dir / "job.json"
    job_json.write_text(json.dumps(spec, indent=1))
    os.chdir(job_dir)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, "-m", args.entry, str(job_json)])
    return 0  # not reached: execv replaces this process


if __name__ == "__main__":
    sys.exit(main())
