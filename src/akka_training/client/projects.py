"""Projects and their quotas."""

from __future__ import annotations

from typing import TYPE_CHECKING

from akka_training import api
from akka_training.client.base import BaseClient

if TYPE_CHECKING:
    # The models are named api.<noun>.<Model>: `akka_training.api` imports a noun's module
    # when a call first needs it. These imports tell mypy what those modules hold.
    import akka_training.api.projects  # noqa: F401


class ProjectsApi(BaseClient):
    def projects(self) -> list[api.projects.Project]:
        return self.call(list[api.projects.Project], "GET", "/v1/projects")

    def project(self, name: str) -> api.projects.ProjectDetail:
        return self.call(api.projects.ProjectDetail, "GET", f"/v1/projects/{name}")

    def create_project(
        self, name: str, quota: int | None = None, description: str | None = None
    ) -> api.projects.Project:
        """A new project (admin); `quota` is the devices it may hold at once (None: no limit)."""
        body = api.projects.ProjectRequest(name=name, quota=quota, description=description)
        return self.call(api.projects.Project, "POST", "/v1/projects", json=body.to_json())

    def set_quota(self, name: str, quota: int | None) -> api.projects.Project:
        body = api.projects.QuotaRequest(quota=quota)
        return self.call(
            api.projects.Project, "PUT", f"/v1/projects/{name}/quota", json=body.to_json()
        )
