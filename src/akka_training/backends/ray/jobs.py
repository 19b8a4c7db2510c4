"""Reading Ray's answers: a job's state as the backend reports it, which errors mean the cluster
did not answer and which mean it refused, and byte offsets into a job's log.

Ray's job SDK raises ``RuntimeError("Request failed with status code N: BODY.")`` for an HTTP
error; when the dashboard forwards a submission to a node's job agent and the agent refuses it,
the dashboard answers 500 with the agent's ``status code 400`` and traceback inside the body.
A connection error or a timeout never reached the cluster.
"""

from __future__ import annotations

import re
import signal

from akka_training.backends.base import ClusterUnreachable, JobStatus, LaunchRefused

# Ray's job states.
PENDING, RUNNING = "PENDING", "RUNNING"
SUCCEEDED, FAILED, STOPPED = "SUCCEEDED", "FAILED", "STOPPED"
# The job's supervisor (the Ray actor that runs the entrypoint) died, with its node or its
# worker: Ray lost the job. Its process cannot have outlived it (Ray kills the entrypoint's
# process group when the supervisor goes).
SUPERVISOR_DIED = "JOB_SUPERVISOR_ACTOR_DIED"

_STATUS_CODE = re.compile(r"status code (\d{3})")
_ERROR_LINE = re.compile(r"^\s*((?:[\w.]+)?(?:Error|Exception)): (.+)$", re.M)
# Answers of a cluster that is up but cannot take a submission yet, or of a proxy in front of a
# head that is down: transient, as a connection error is.
_NOT_READY = re.compile(r"No available agent|agent.*not (?:ready|available)", re.I)
_GATEWAY_CODES = {502, 503, 504}
# Exit codes of the shell that runs the entrypoint when it cannot start the interpreter.
_SHELL_CODES = {
    126: "exit code 126: the entrypoint's interpreter is not executable on the Ray node; "
    "trainer.ray.python must name an interpreter there",
    127: "exit code 127: the entrypoint's interpreter was not found on the Ray node; "
    "trainer.ray.python must name an interpreter there",
}


def job_status(
    state: str,
    exit_code: int | None = None,
    error_type: str | None = None,
    message: str | None = None,
) -> JobStatus:
    """The backend's view of a Ray job from its state, driver exit code, error type and
    message."""
    if state in (PENDING, RUNNING):
        return JobStatus("running")
    if state == SUCCEEDED:
        return JobStatus("exited", exit_code if exit_code is not None else 0)
    if state == STOPPED:
        return JobStatus(
            "exited", None, signal.SIGTERM, detail="the job was stopped through Ray (stop_job)"
        )
    if state == FAILED:
        if exit_code is not None:
            # The entrypoint execs the job, so a job killed by a signal shows as -N.
            if exit_code < 0:
                return JobStatus("exited", None, -exit_code)
            return JobStatus("exited", exit_code, detail=_SHELL_CODES.get(exit_code))
        detail = _first_lines(message, 6)
        if error_type == SUPERVISOR_DIED:
            return JobStatus("missing", detail=f"Ray lost the job ({error_type}): {detail}")
        return JobStatus("exited", None, None, detail=f"Ray: {error_type or 'FAILED'}: {detail}")
    return JobStatus("running", detail=f"Ray reports the unknown job state {state!r}")


def http_status(error: BaseException) -> int | None:
    """The HTTP status of a failed request as Ray's SDK reports it (the outermost one)."""
    match = _STATUS_CODE.search(str(error))
    return int(match.group(1)) if match else None


def is_not_found(error: BaseException) -> bool:
    return http_status(error) == 404


def already_exists(error: BaseException) -> bool:
    """A submission refused because its submission id is taken."""
    return "already exists" in str(error) and "submission_id" in str(error)


def submit_error(error: BaseException) -> ClusterUnreachable | LaunchRefused:
    """What a failed submission means for the caller: retry later, or a refusal."""
    if is_transport_error(error):
        return ClusterUnreachable(f"the Ray head did not answer: {_first_lines(str(error), 1)}")
    text = str(error)
    codes = [int(c) for c in _STATUS_CODE.findall(text)]
    answered_4xx = any(400 <= c < 500 for c in codes)
    if codes and not answered_4xx and (codes[0] in _GATEWAY_CODES or _NOT_READY.search(text)):
        return ClusterUnreachable(f"the Ray head cannot take jobs now: {reason(text)}")
    return LaunchRefused(f"Ray refused the job: {reason(text)}")


def unreachable(error: BaseException, what: str) -> ClusterUnreachable:
    """Any failure to read from the cluster: the caller only needs to know it has no answer."""
    return ClusterUnreachable(f"could not {what} on the Ray cluster: {reason(str(error))}")


def is_transport_error(error: BaseException) -> bool:
    """A connection error or a timeout: the request never got an answer. Ray's SDK raises the
    builtin ConnectionError for a failed version check and `requests`' own errors (subclasses
    of OSError) otherwise."""
    return isinstance(error, (ConnectionError, TimeoutError, OSError))


def reason(text: str) -> str:
    """The sentence that explains an error: the last ``SomethingError: message`` line of a
    traceback in it (the server's own reason), else its first line."""
    found = _ERROR_LINE.findall(text)
    if found:
        name, message = found[-1]
        return f"{name.rsplit('.', 1)[-1]}: {message.strip().rstrip('.')}"
    return _first_lines(text, 1)


def slice_log(text: str, offset: int) -> tuple[str, int]:
    """The part of a job's log from byte `offset` (negative: from the end), and the offset to
    continue from. Offsets count UTF-8 bytes, as the local backend's do."""
    data = text.encode("utf-8")
    size = len(data)
    start = max(0, size + offset) if offset < 0 else min(offset, size)
    return data[start:].decode("utf-8", errors="replace"), size


def _first_lines(text: str | None, n: int) -> str:
    lines = [line for line in (text or "").splitlines() if line.strip()]
    return "\n".join(lines[:n]) if lines else "no message"
