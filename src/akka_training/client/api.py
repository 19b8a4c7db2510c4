"""`TrainerClient`: the trainer's HTTP API as Python calls, one mixin per noun.

Errors come back as the exception the service raised (`akka_training.core.errors`), rebuilt
from the error code; a service that does not answer raises `TrainerUnreachable`.
"""

from __future__ import annotations

from akka_training.client.bundles import BundlesApi
from akka_training.client.datasets import DatasetsApi
from akka_training.client.runs import RunsApi
from akka_training.client.system import SystemApi


class TrainerClient(SystemApi, DatasetsApi, BundlesApi, RunsApi):
    pass
