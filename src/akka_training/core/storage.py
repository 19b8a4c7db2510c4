"""Where the blob store is and how to reach it, as the service hands it to a job.

`StorageSpec` carries everything but the credentials: the URL (``file:///PATH`` or
``s3://BUCKET/PREFIX``) and, for S3, the endpoint, region, addressing style and part size. A
job's credentials travel in its environment (the standard ``AWS_*`` variables), never in its
spec, its logs or the run's record.
"""

from __future__ import annotations

from pydantic import Field

from akka_training.core.errors import ServiceUnavailable
from akka_training.core.plans import PlanModel

# The part size of a multipart upload: S3 takes parts of 5 MiB or more (but the last).
MIN_PART_MIB = 5
DEFAULT_PART_MIB = 8


class S3Options(PlanModel):
    endpoint_url: str | None = None
    region: str | None = None
    path_style: bool = False
    part_size_mib: int = Field(DEFAULT_PART_MIB, ge=MIN_PART_MIB, le=512)


class StorageSpec(PlanModel):
    url: str
    s3: S3Options = Field(default_factory=S3Options)


class StoreUnreachable(ServiceUnavailable):
    """The blob store could not be reached or refused this trainer's credentials."""


def unreachable_message(url: str, why: str, where: str = "trainer.storage") -> str:
    """What to tell whoever cannot reach the store: its URL, the error, the settings to check.
    `where` is ``trainer.storage`` for the service; ``job`` for a training job (which may have
    reached it through ``trainer.ray.storage-url``)."""
    url_setting = (
        "trainer.storage.url (trainer.ray.storage-url where jobs on Ray reach it elsewhere)"
        if where == "job"
        else f"{where}.url"
    )
    return (
        f"The blob store {url} could not be reached ({why}); check {url_setting}, "
        "trainer.storage.s3.endpoint-url and the store's credentials "
        "(trainer.storage.s3.access-key-id and secret-access-key, or the AWS_ACCESS_KEY_ID and "
        "AWS_SECRET_ACCESS_KEY of the environment)."
    )
