"""Where everything lives in the blob store: the one owner of the key layout.

    datasets/sha256/<hash>.jsonl                 a dataset version's rows
    datasets/uploads/<random>.jsonl              an upload being received (moved when whole)
    bundles/sha256/<hash>.zip                    a scoring bundle, packed canonically
    runs/<run>/adapter/                          the run's final adapter (PEFT layout)
    runs/<run>/tokenizer/                        the tokenizer (or processor) files and chat
                                                 template the run trained with
    runs/<run>/merged/<final|step-N>/            a merged full model (`runs export --merged`)
    runs/<run>/snapshots/step-<N>/weights/       a snapshot's adapter
    runs/<run>/snapshots/step-<N>/training-state/  optimizer, scheduler, RNG, data position
    runs/<run>/rollouts/step-<N>.parquet         one step's scored rollouts
    runs/<run>/regrades/<task>/step-<N>.parquet  a step's rollouts scored again by a regrade
    runs/<run>/attempts/<K>/<name>               what one attempt leaves (stall dumps, ...)

The service, the engines and the scripted job all build keys here, so that a change of layout
is one change, seen by every test that runs a job. Prefixes end with a slash.
"""

from __future__ import annotations

from dataclasses import dataclass

DATASET_UPLOADS = "datasets/uploads"
# Everything of every run lies under this prefix.
RUNS = "runs"


def dataset_key(sha256: str) -> str:
    return f"datasets/sha256/{sha256}.jsonl"


def bundle_key(sha256: str) -> str:
    return f"bundles/sha256/{sha256}.zip"


def adapter_prefix(run_id: str) -> str:
    return f"runs/{run_id}/adapter/"


def tokenizer_prefix(run_id: str) -> str:
    return f"runs/{run_id}/tokenizer/"


def evaluation_samples(evaluation_id: str) -> str:
    """The scored samples of an evaluation (JSONL, one sample a line)."""
    return f"evaluations/{evaluation_id}/samples.jsonl"


def merged_prefix(run_id: str, snapshot: str | None) -> str:
    """Where the merged model of the run's final adapter (or of one snapshot's) lies."""
    return f"runs/{run_id}/merged/{snapshot or 'final'}/"


def snapshot_name(step: int) -> str:
    return f"step-{step}"


@dataclass(frozen=True)
class SnapshotKeys:
    """Where one snapshot's parts live."""

    name: str
    prefix: str
    weights: str
    training_state: str


def snapshot_prefix(run_id: str, name: str) -> str:
    """Where everything of the run's snapshot `name` lies."""
    return f"runs/{run_id}/snapshots/{name}/"


def snapshot_of(key: str) -> tuple[str, str] | None:
    """The run and snapshot name of a key under a snapshot's prefix; None for any other key."""
    parts = key.split("/")
    if len(parts) > 4 and parts[0] == RUNS and parts[2] == "snapshots":
        return parts[1], parts[3]
    return None


def snapshot_keys(run_id: str, step: int) -> SnapshotKeys:
    name = snapshot_name(step)
    prefix = snapshot_prefix(run_id, name)
    return SnapshotKeys(
        name=name,
        prefix=prefix,
        weights=f"{prefix}weights/",
        training_state=f"{prefix}training-state/",
    )


def rollouts_key(run_id: str, step: int) -> str:
    return f"runs/{run_id}/rollouts/step-{step}.parquet"


def regrade_prefix(run_id: str, task_id: str) -> str:
    return f"runs/{run_id}/regrades/{task_id}/"


def attempt_key(run_id: str, attempt: int, name: str) -> str:
    return f"runs/{run_id}/attempts/{attempt}/{name}"
