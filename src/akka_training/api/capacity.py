"""Capacity at one point in time: pools, the claims on them, and projects' quotas.

For each pool ``free + granted + outside == declared``: `outside` counts declared devices the
cluster does not offer now. `max_claim` is the largest claim the pool accepts.
"""

from __future__ import annotations

from pydantic import Field

from akka_training.api.base import ResponseBody, Timestamp


class PoolCapacity(ResponseBody):
    pool: str
    accelerator: str
    free: int
    granted: int
    outside: int
    declared: int
    observed: int | None = Field(description="None: the cluster did not answer.")
    queued: int = Field(description="Claims waiting for the pool's devices.")
    max_claim: int
    host_ram_gib: float | None


class Claim(ResponseBody):
    kind: str = Field(description="run, or evaluation (a task claiming devices like a run).")
    for_: str = Field(alias="for", description="The run (or evaluation) the devices are for.")
    project: str
    devices: int
    pool: str
    state: str = Field(description="QUEUED or GRANTED.")
    since: Timestamp = Field(description="When the claim was granted, or made if still queued.")
    since_seconds: float


class ProjectCapacity(ResponseBody):
    project: str
    quota: int | None
    held: int
    queued: int


class Capacity(ResponseBody):
    pools: list[PoolCapacity]
    claims: list[Claim]
    projects: list[ProjectCapacity]
