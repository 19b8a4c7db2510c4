"""How a job travels to a Ray worker: its submission id, the command Ray runs, and the runtime
environment it is submitted with.

The command is short and readable (Ray prints it at the top of the job's log and in
``ray job list``): the bootstrap module, run by the workers' interpreter given by absolute path
(the entrypoint inherits the PATH of whoever started Ray, not ours). The job spec rides in the
runtime environment, compressed, as ``AKKA_JOB_SPEC``; the bootstrap writes it to ``job.json``
in the job's working directory on the worker and removes it from the environment before the job
starts. The job's token rides beside it in the environment (never in the spec).
"""

from __future__ import annotations

import base64
import copy
import json
import shlex
import zlib
from typing import Any

BOOTSTRAP_MODULE = "akka_training.backends.ray.bootstrap"
SPEC_ENV = "AKKA_JOB_SPEC"
# The node label whose value names a pool (`trainer.pools[].label`).
POOL_LABEL = "pool"
# Linux refuses an environment string longer than 128 KiB (MAX_ARG_STRLEN) when it starts a
# process; the encoded spec must stay well below it.
MAX_SPEC_CHARS = 120_000


class SpecTooLarge(ValueError):
    """The encoded job spec does not fit in one environment variable."""


def submission_id(run_id: str, attempt: int) -> str:
    """The Ray submission id of one attempt: the same run and attempt always give the same id,
    which is what makes a second launch find the first one."""
    return f"akka-{run_id}-{attempt}"


def entrypoint(
    python: str, entry_module: str, run_id: str, attempt: int, work_dir: str | None = None
) -> str:
    """The shell command Ray runs for the job. ``exec`` makes the job the process Ray watches,
    so its exit code (or the signal that killed it) is what Ray records."""
    argv = [
        python,
        "-m",
        BOOTSTRAP_MODULE,
        "--entry",
        entry_module,
        "--run",
        run_id,
        "--attempt",
        str(attempt),
    ]
    if work_dir:
        argv += ["--work-dir", work_dir]
    return "exec " + shlex.join(argv)


def encode_spec(spec: dict[str, Any]) -> str:
    """The job spec as one environment-safe string (JSON, zlib, base64)."""
    raw = json.dumps(spec, separators=(",", ":"), sort_keys=True).encode()
    encoded = base64.b64encode(zlib.compress(raw, 9)).decode("ascii")
    if len(encoded) > MAX_SPEC_CHARS:
        raise SpecTooLarge(
            f"the job spec takes {len(encoded)} characters once encoded; at most "
            f"{MAX_SPEC_CHARS} fit in the job's environment"
        )
    return encoded


def decode_spec(encoded: str) -> dict[str, Any]:
    spec = json.loads(zlib.decompress(base64.b64decode(encoded.encode("ascii"))))
    if not isinstance(spec, dict):
        raise ValueError("the job spec is not a JSON object")
    return spec


def runtime_env(
    base: dict[str, Any] | None, job_env: dict[str, str], encoded_spec: str, *, cpu_only: bool
) -> dict[str, Any]:
    """The runtime environment of one job: the deployment's own (`trainer.ray.runtime-env`)
    with the job's variables over its ``env_vars``. An ``env_vars`` that is not a mapping is
    left as the deployment wrote it, so that Ray refuses it with its own message."""
    env = copy.deepcopy(base or {})
    ours = {**job_env, SPEC_ENV: encoded_spec}
    if cpu_only:
        # A job on a CPU pool sees no GPU even on a node that has some.
        ours["CUDA_VISIBLE_DEVICES"] = ""
    extra = env.get("env_vars")
    if extra is None or isinstance(extra, dict):
        env["env_vars"] = {**(extra or {}), **ours}
    return env


def is_cpu_pool(accelerator: str) -> bool:
    return accelerator.strip().lower() == "cpu"
