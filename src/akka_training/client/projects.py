"""Projects and their quotas."""

from __future__ import annotations

from akka_training.api.projects import Project, ProjectDetail, ProjectRequest, QuotaRequest
from akka_training.client.base import BaseClient


class ProjectsApi(BaseClient):
    def projects(self) -> list[Project]:
        return self.call(list[Project], "GET", "/v1/projects")

    def project(self, name: str) -> ProjectDetail:
        return self.call(ProjectDetail, "GET", f"/v1/projects/{name}")

    def create_project(
        self, name: str, quota: int | None = None, description: str | None = None
    ) -> Project:
        """A new project (admin); `quota` is the devices it may hold at once (None: no limit)."""
        body = ProjectRequest(name=name, quota=quota, description=description)
        return self.call(Project, "POST", "/v1/projects", json=body.to_json())

    def set_quota(self, name: str, quota: int | None) -> Project:
        body = QuotaRequest(quota=quota)
        return self.call(Project, "PUT", f"/v1/projects/{name}/quota", json=body.to_json())
