"""`TrainerClient`: the trainer's HTTP API as Python calls, one mixin per noun, each answer a
model of `akka_training.api` (downloads write files and answer what they wrote).

Errors come back as the exception the service raised (`akka_training.core.errors`), rebuilt
from the error code; a service that does not answer raises `TrainerUnreachable`. `connect()`
(in `client.connection`) finds the trainer and a token as the CLI does.
"""

from __future__ import annotations

from akka_training.client.adapters import AdaptersApi
from akka_training.client.bundles import BundlesApi
from akka_training.client.capacity import CapacityApi
from akka_training.client.catalog import CatalogApi
from akka_training.client.datasets import DatasetsApi
from akka_training.client.endpoints import EndpointsApi
from akka_training.client.evaluations import EvaluationsApi
from akka_training.client.pipelines import PipelinesApi
from akka_training.client.projects import ProjectsApi
from akka_training.client.runs import RunsApi
from akka_training.client.system import SystemApi
from akka_training.client.tasks import TasksApi


class TrainerClient(
    SystemApi,
    ProjectsApi,
    CatalogApi,
    CapacityApi,
    DatasetsApi,
    BundlesApi,
    AdaptersApi,
    RunsApi,
    TasksApi,
    EvaluationsApi,
    PipelinesApi,
    EndpointsApi,
):
    """``TrainerClient(url, token)``, or `connect()` to find both as the CLI does. Close it
    (or use it as a context manager) to release its connections."""
