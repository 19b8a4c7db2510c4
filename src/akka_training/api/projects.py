"""Projects: the tenancy unit, with a device quota."""

from __future__ import annotations

from pydantic import Field

from akka_training.api.base import RequestBody, ResponseBody, Timestamp
from akka_training.core.bounds import Description, Int, Name
from akka_training.core.limits import INT32_MAX


class Project(ResponseBody):
    name: str
    description: str | None
    quota: int | None = Field(description="Devices the project may hold at once; None: no limit.")
    held: int = Field(description="Devices its runs hold now.")
    queued: int = Field(description="Claims of its runs waiting for devices.")
    created_at: Timestamp


class Member(ResponseBody):
    token: str
    name: str
    kind: str


class ProjectDetail(Project):
    members: list[Member] = Field(description="The admin and project tokens that may use it.")


# A quota is stored in an INTEGER column: at most 2147483647 (the service refuses one below 0).
Quota = Int | None


class ProjectRequest(RequestBody):
    name: Name
    quota: Quota = Field(None, le=INT32_MAX, description="None: no limit.")
    description: Description | None = None


class QuotaRequest(RequestBody):
    quota: Quota = Field(le=INT32_MAX, description="None: no limit.")
