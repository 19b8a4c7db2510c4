"""The blob store: datasets, bundles, snapshots, adapters and rollouts, by key.

Both the service and the training jobs use it, so it lives outside `storage` (which jobs must
not import). `open_blob_store(url)` picks the implementation from the URL.
"""

from akka_training.blobstore.base import BlobStore, BlobWriter
from akka_training.blobstore.local import LocalBlobStore
from akka_training.blobstore.open import open_blob_store

__all__ = ["BlobStore", "BlobWriter", "LocalBlobStore", "open_blob_store"]
