"""How a job's (and a task's) log is set up."""

from __future__ import annotations

import logging

# Libraries whose INFO lines are one per request or file (httpx logs every report the job
# posts): a job's log shows their warnings only.
QUIET_LOGGERS = (
    "httpx",
    "httpcore",
    "urllib3",
    "botocore",
    "boto3",
    "s3transfer",
    "filelock",
    "fsspec",
    "huggingface_hub",
    "mlflow",
    "alembic",
)


def configure_logging() -> None:
    """The job's log: INFO and above from the trainer, WARNING and above from the libraries
    that log each request."""
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
