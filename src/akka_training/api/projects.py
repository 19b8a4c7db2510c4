"""Projects: the tenancy unit, with a device quota."""

from __future__ import annotations

from pydantic import Field

from akka_training.api.base import RequestBody, ResponseBody, Timestamp


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


class ProjectRequest(RequestBody):
    name: str
    quota: int | None = None
    description: str | None = None


class QuotaRequest(RequestBody):
    quota: int | None
