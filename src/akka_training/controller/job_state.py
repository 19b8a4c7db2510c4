"""Deciding about a run's job, shared by the phases that hold devices: launch a pending attempt
when its back-off has passed, and read a job that ended."""

from __future__ import annotations

from datetime import datetime

from akka_training.controller.classify import classify_exit, retryable
from akka_training.controller.views import Decision, Limits, Probe, RunView
from akka_training.core.phases import RuleName
from akka_training.core.states import AttemptOutcome, AttemptState


def launch_due(view: RunView, now: datetime) -> bool:
    attempt = view.attempt
    return (
        attempt is not None
        and attempt.state == AttemptState.PENDING
        and (attempt.next_try_at is None or attempt.next_try_at <= now)
    )


def job_running(view: RunView) -> bool:
    return view.attempt is not None and view.attempt.state == AttemptState.LAUNCHED


def cancel(view: RunView, probe: Probe) -> Decision:
    """A cancel of a run that holds devices: stop its job, end the run once the job is gone."""
    if not job_running(view) or _exited(probe):
        return Decision(rule=RuleName.CANCEL, release_claim=True, attempt_exited=job_running(view))
    if view.attempt is not None and not view.attempt.stop_sent:
        return Decision(stop_job=True)
    return Decision()


def ended(view: RunView, probe: Probe, limits: Limits) -> Decision | None:
    """The decision for a job that is gone while its run still expects it, or None. A job that
    died without a report runs again from the run's last snapshot, up to `job_retries` times in
    a row (`retry_delay` apart); then, or at once when it ran out of memory, the run fails with
    the cause."""
    if probe.status is None:
        return None
    if probe.status.state == "missing":
        # The cluster lost the job: it runs again from its last snapshot.
        return Decision(rule=RuleName.REQUEUE, attempt_exited=True, release_claim=True)
    if probe.status.state != "exited":
        return None
    assert view.attempt is not None
    if view.attempt.outcome == AttemptOutcome.STOPPED:
        # It stopped without being asked (the service had restarted and lost the request, or
        # the job was told to stop by a stale directive): run it again from its last snapshot.
        return Decision(rule=RuleName.REQUEUE, attempt_exited=True, release_claim=True)
    if view.attempt.outcome is not None:
        # The job reported its end; the report moved the run. Only the bookkeeping is left.
        return Decision(attempt_exited=True, release_claim=True)
    reason, detail = classify_exit(probe.status, probe.log_tail)
    if view.interactive:
        # The client's model lived in the job: a new attempt would not hold it.
        detail = f"{detail}\nAn interactive run's job is not started again; create a new training client."
        return Decision(
            rule=RuleName.FAIL,
            reason=reason,
            detail=detail,
            attempt_exited=True,
            release_claim=True,
        )
    if retryable(reason) and view.crashes < limits.job_retries:
        cause = detail.splitlines()[0] if detail else reason.sentence
        return Decision(
            rule=RuleName.REQUEUE,
            attempt_exited=True,
            release_claim=True,
            retry=True,
            note=(
                f"died without a report ({cause}); the run goes on from its last snapshot in a "
                f"new attempt (retry {view.crashes + 1} of {limits.job_retries})"
            ),
        )
    if view.crashes:
        attempts = view.crashes + 1
        detail = (
            f"the job died without a report on {attempts} attempts in a row; the last:\n{detail}"
        )
    return Decision(
        rule=RuleName.FAIL, reason=reason, detail=detail, attempt_exited=True, release_claim=True
    )


def retry_delay(crashes: int, limits: Limits) -> float | None:
    """The back-off before the launch of the attempt after `crashes` deaths in a row."""
    if crashes <= 0:
        return None
    return limits.retry_base_seconds * 2.0 ** (crashes - 1)


def stalled(view: RunView, now: datetime, limits: Limits) -> bool | None:
    """True when the run's steps stopped rising for longer than the window while its job lives;
    False when a stalled run moves again; None for no change."""
    if view.last_step_at is None:
        return None
    quiet = (now - view.last_step_at).total_seconds()
    if quiet > limits.stall_seconds and not view.stalled:
        return True
    return None


def _exited(probe: Probe) -> bool:
    return probe.status is not None and probe.status.state in ("exited", "missing")
