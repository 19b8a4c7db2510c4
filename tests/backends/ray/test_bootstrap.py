"""The bootstrap on a worker: it writes the spec where the job runs and becomes the job,
outside the Ray cluster it runs on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from akka_training.backends.ray.entrypoint import SPEC_ENV, encode_spec, entrypoint

SRC = Path(__file__).resolve().parents[3] / "src"

# A stand-in job: prints what a job would see (its pid, cwd, spec file, environment).
PROBE = """
import fcntl, json, os, sys
mark = os.open(".akka-job", os.O_RDWR)
try:
    fcntl.flock(mark, fcntl.LOCK_EX | fcntl.LOCK_NB)
    locked = False
except BlockingIOError:
    locked = True
print(json.dumps({
    "locked": locked,
    "pid": os.getpid(),
    "cwd": os.getcwd(),
    "argv": sys.argv[1:],
    "spec": json.load(open(sys.argv[1])),
    "env_has_spec": "AKKA_JOB_SPEC" in os.environ,
    "ray_env": sorted(k for k in os.environ if k in ("RAY_ADDRESS", "RAY_JOB_CONFIG_JSON_ENV_VAR")),
    "token": os.environ.get("AKKA_JOB_BOOTSTRAP"),
}))
"""


def _run(tmp_path: Path, env_extra: dict[str, str]) -> subprocess.CompletedProcess[str]:
    (tmp_path / "probe_job.py").write_text(PROBE)
    command = entrypoint(sys.executable, "probe_job", "r-7", 3, str(tmp_path / "jobs"))
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(SRC), str(tmp_path)]),
        **env_extra,
    }
    # As Ray runs it: a shell command in a fresh process, whose pid Ray watches.
    proc = subprocess.Popen(
        command, shell=True, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    out, err = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(proc.args, proc.returncode, f"{proc.pid}\n{out}", err)


def test_the_bootstrap_writes_the_spec_and_becomes_the_job(tmp_path: Path) -> None:
    spec = {"runId": "r-7", "attempt": 3, "trainerUrl": "http://trainer:9001"}
    ray_env = {"RAY_ADDRESS": "10.0.0.1:6379", "RAY_JOB_CONFIG_JSON_ENV_VAR": "{}"}
    result = _run(tmp_path, {SPEC_ENV: encode_spec(spec), "AKKA_JOB_BOOTSTRAP": "tok", **ray_env})
    assert result.returncode == 0, result.stderr
    shell_pid, line = result.stdout.splitlines()[:2]
    seen = json.loads(line)
    job_dir = tmp_path / "jobs" / "r-7" / "3"
    assert seen["pid"] == int(shell_pid)  # the job is the very process Ray started
    assert seen["cwd"] == str(job_dir)
    assert seen["argv"] == [str(job_dir / "job.json")]
    assert seen["spec"] == spec
    assert seen["env_has_spec"] is False
    assert seen["ray_env"] == []  # the job does not join the cluster it runs on
    assert seen["token"] == "tok"
    assert seen["locked"] is True  # its directory is held for as long as it lives


def test_the_bootstrap_removes_what_killed_jobs_left_on_its_node(tmp_path: Path) -> None:
    left = tmp_path / "jobs" / "r-1" / "2"
    (left / "checkpoints" / "global_step_4").mkdir(parents=True)
    (left / ".akka-job").touch()  # marked, and no live job holds it
    (left / "job.json").write_text("{}")
    unmarked = tmp_path / "jobs" / "someone" / "else"
    unmarked.mkdir(parents=True)
    spec = {"runId": "r-7", "attempt": 3}
    result = _run(tmp_path, {SPEC_ENV: encode_spec(spec), "AKKA_JOB_BOOTSTRAP": "tok"})
    assert result.returncode == 0, result.stderr
    assert not (tmp_path / "jobs" / "r-1").exists()
    assert unmarked.is_dir()  # never a directory no backend marked


def test_a_job_without_a_spec_ends_with_a_message(tmp_path: Path) -> None:
    result = _run(tmp_path, {})
    assert result.returncode == 2
    assert "AKKA_JOB_SPEC is not set" in result.stderr
