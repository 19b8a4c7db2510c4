"""Scoring bundles inside a job: the code a run's rule terms and tools call, unpacked from the
blob store into the job directory on first use."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from akka_training.blobstore import BlobStore
from akka_training.core.resolved import Settings
from akka_training.engines.failures import RewardError
from akka_training.rewards.bundles import unpack_bundle

BundleResolver = Callable[[str], Path]


def bundle_resolver(settings: Settings, store: BlobStore, root: Path) -> BundleResolver:
    """Turns a bundle reference as the config's terms and tools carry it (pinned in
    ``settings.bundles``) into the directory it is unpacked in, verified against its hash."""

    def resolve(ref: str) -> Path:
        pin = settings.bundles.get(ref)
        if pin is None:
            raise RewardError(f"the scoring bundle {ref} is not pinned in the run's settings")
        try:
            data = store.get_bytes(pin.blob)
        except FileNotFoundError as exc:
            raise RewardError(f"the scoring bundle {ref} is missing from storage") from exc
        digest = pin.sha256.lower().removeprefix("sha256:")
        return unpack_bundle(data, pin.sha256, root / digest[:16])

    return resolve
