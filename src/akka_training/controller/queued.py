"""QUEUED: waiting for devices. The scheduler grants claims; this admits a granted run."""

from __future__ import annotations

from datetime import datetime

from akka_training.controller.job_state import retry_delay
from akka_training.controller.views import Decision, Limits, Probe, RunView
from akka_training.core.failures import FailureReason
from akka_training.core.phases import RuleName
from akka_training.core.states import ClaimState


def process(view: RunView, probe: Probe, now: datetime, limits: Limits) -> Decision:
    if view.claim_state == ClaimState.GRANTED:
        return Decision(
            rule=RuleName.ADMIT,
            new_attempt=True,
            launch_delay=retry_delay(view.crashes, limits),
        )
    largest = probe.largest_node
    if view.claim_state == ClaimState.QUEUED and largest and view.claim_devices > largest:
        # Submission refuses such a claim; this one came in while the cluster's nodes were not
        # known. Granted, it would wait on the cluster for devices no node has.
        return Decision(
            rule=RuleName.FAIL,
            reason=FailureReason.JOB_START_FAILED,
            detail=(
                f"It claims {view.claim_devices} devices, and the largest node of pool "
                f"{view.pool} offers {largest}: a run's devices are on one node. Set "
                f"execution.gpus to {largest} or less, or choose another execution.pool."
            ),
            release_claim=True,
        )
    since = probe.cluster_unreachable_since
    if since is not None and view.claim_created_at is not None:
        waited = (now - max(since, view.claim_created_at)).total_seconds()
        if waited > limits.unreachable_seconds:
            return Decision(
                rule=RuleName.FAIL,
                reason=FailureReason.CLUSTER_UNREACHABLE,
                detail=f"The cluster did not answer for {waited:.0f} s.",
                release_claim=True,
            )
    return Decision()
