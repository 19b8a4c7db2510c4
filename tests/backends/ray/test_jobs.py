"""Reading Ray's answers: job states, errors that mean "no answer" against refusals, log
offsets. The error texts are the shapes Ray 2.60's job SDK raises."""

from __future__ import annotations

import signal

import pytest
import requests

from akka_training.backends.base import ClusterUnreachable, JobStatus, LaunchRefused
from akka_training.backends.ray.jobs import (
    already_exists,
    http_status,
    job_status,
    reason,
    slice_log,
    submit_error,
)

AGENT_REFUSAL = (
    "Request failed with status code 500: Traceback (most recent call last):\n"
    '  File ".../ray/dashboard/modules/job/job_head.py", line 419, in submit_job\n'
    "    resp = await job_agent_client.submit_job_internal(submit_request)\n"
    "RuntimeError: Request failed with status code 400: Traceback (most recent call last):\n"
    '  File ".../ray/dashboard/modules/job/job_manager.py", line 537, in submit_job\n'
    "    raise ValueError(error_message)\n"
    "ValueError: Invalid label selector value `bad value!`. The label selector value should "
    "contain optional operators and a label value.\n.\n."
)
DUPLICATE = AGENT_REFUSAL.replace(
    "ValueError: Invalid label selector value `bad value!`. The label selector value should "
    "contain optional operators and a label value.",
    "ValueError: Job with submission_id akka-r-1-1 already exists. Please use a different "
    "submission_id.",
)
NO_AGENT = (
    "Request failed with status code 500: No available agent to submit job, please try again "
    "later.."
)


@pytest.mark.parametrize("state", ["PENDING", "RUNNING"])
def test_a_job_waiting_or_running_runs(state: str) -> None:
    assert job_status(state) == JobStatus("running")


def test_a_job_that_succeeded_exited_zero() -> None:
    assert job_status("SUCCEEDED", 0) == JobStatus("exited", 0)


def test_a_failed_job_keeps_its_exit_code() -> None:
    assert job_status("FAILED", 3, "JOB_ENTRYPOINT_COMMAND_ERROR", "failed") == JobStatus(
        "exited", 3
    )


def test_an_interpreter_the_node_does_not_have_is_named() -> None:
    status = job_status("FAILED", 127, "JOB_ENTRYPOINT_COMMAND_ERROR", "failed")
    assert status.exit_code == 127
    assert "trainer.ray.python" in (status.detail or "")


def test_a_job_killed_by_a_signal_reports_the_signal() -> None:
    status = job_status("FAILED", -9, "JOB_ENTRYPOINT_COMMAND_ERROR", "failed")
    assert status.state == "exited" and status.signal == signal.SIGKILL
    assert status.exit_code is None


def test_a_stopped_job_ended_with_sigterm() -> None:
    status = job_status("STOPPED")
    assert status.state == "exited" and status.signal == signal.SIGTERM
    assert "stopped through Ray" in (status.detail or "")


def test_a_job_that_never_started_says_why() -> None:
    status = job_status(
        "FAILED", None, "RUNTIME_ENV_SETUP_FAILURE", "Failed to set up runtime env.\nmore"
    )
    assert status.state == "exited" and status.exit_code is None and status.signal is None
    assert status.detail == "Ray: RUNTIME_ENV_SETUP_FAILURE: Failed to set up runtime env.\nmore"


def test_a_job_whose_supervisor_died_is_lost() -> None:
    status = job_status("FAILED", None, "JOB_SUPERVISOR_ACTOR_DIED", "The actor died.")
    assert status.state == "missing"
    assert "JOB_SUPERVISOR_ACTOR_DIED" in (status.detail or "")


def test_the_outer_http_status_is_read() -> None:
    assert (
        http_status(RuntimeError("Request failed with status code 404: Job x does not exist."))
        == 404
    )
    assert http_status(RuntimeError(AGENT_REFUSAL)) == 500
    assert http_status(ValueError("no code here")) is None


@pytest.mark.parametrize(
    "error",
    [
        ConnectionError("Failed to connect to Ray at address: http://127.0.0.1:1."),
        requests.exceptions.ConnectionError("Max retries exceeded"),
        requests.exceptions.ReadTimeout("Read timed out. (read timeout=10)"),
        RuntimeError(NO_AGENT),
        RuntimeError("Request failed with status code 503: Service Unavailable."),
    ],
)
def test_no_answer_or_a_head_not_ready_is_unreachable(error: Exception) -> None:
    assert isinstance(submit_error(error), ClusterUnreachable)


@pytest.mark.parametrize(
    ("error", "words"),
    [
        (RuntimeError(AGENT_REFUSAL), "ValueError: Invalid label selector value `bad value!`"),
        (
            TypeError(
                "runtime_env['env_vars'] must be of type Dict[str, str], but the value 1 is of type <class 'int'>"
            ),
            "runtime_env['env_vars'] must be of type Dict[str, str]",
        ),
        (RuntimeError("Request failed with status code 400: bad request."), "status code 400"),
        (
            RuntimeError("Request failed with status code 500: Traceback...\nKeyError: 'x'\n."),
            "KeyError: 'x'",
        ),
    ],
)
def test_an_answered_submission_that_failed_is_a_refusal(error: Exception, words: str) -> None:
    refused = submit_error(error)
    assert isinstance(refused, LaunchRefused)
    assert str(refused).startswith("Ray refused the job: ")
    assert words in str(refused)


def test_a_taken_submission_id_is_recognised() -> None:
    assert already_exists(RuntimeError(DUPLICATE))
    assert not already_exists(RuntimeError(AGENT_REFUSAL))


def test_the_reason_is_the_innermost_error_line() -> None:
    assert reason(DUPLICATE) == (
        "ValueError: Job with submission_id akka-r-1-1 already exists. Please use a different "
        "submission_id"
    )
    assert reason("just one line\nand another") == "just one line"


def test_log_offsets_count_bytes_from_the_start_or_the_end() -> None:
    text = "héllo\nwörld\n"  # two characters of two bytes each
    assert slice_log(text, 0) == (text, 14)
    assert slice_log(text, 7) == ("wörld\n", 14)
    assert slice_log(text, -7) == ("wörld\n", 14)
    assert slice_log(text, -100) == (text, 14)
    assert slice_log(text, 14) == ("", 14)
    assert slice_log(text, 99) == ("", 14)
