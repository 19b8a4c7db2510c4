"""Base models kept in object storage: a catalog entry's `path` may be ``s3://BUCKET/PREFIX``
(the model's directory in the Hugging Face layout). A job on a node downloads it once into the
node's model cache and loads it from there; every later job on the node finds it ready.

The cache is ``$AKKA_MODEL_CACHE`` (default ``~/.cache/akka/models``), one directory per model
URL. A download goes to a temporary directory beside it and is renamed into place when whole,
under a file lock, so two jobs starting together on one node download it once and neither ever
loads half a model. The bucket is reached with the job's store settings (endpoint, region,
addressing) and the credentials of its environment.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import shutil
import tempfile
from pathlib import Path

from akka_training.blobstore.s3 import S3BlobStore
from akka_training.core.storage import S3Options

log = logging.getLogger(__name__)

CACHE_ENV = "AKKA_MODEL_CACHE"
READY = ".akka-complete"


def is_remote(path: str) -> bool:
    return path.startswith("s3://")


def cache_root() -> Path:
    raw = os.environ.get(CACHE_ENV) or "~/.cache/akka/models"
    return Path(raw).expanduser()


def _target(root: Path, path: str) -> Path:
    url = path.rstrip("/")
    name = url.rsplit("/", 1)[-1] or "model"
    return root / f"{name}-{hashlib.sha256(url.encode()).hexdigest()[:16]}"


def cached_model(path: str) -> str | None:
    """The whole copy of the model at URL `path` in this node's cache, or None when there is
    none (nothing is downloaded)."""
    target = _target(cache_root(), path)
    return str(target) if (target / READY).is_file() else None


def local_model(path: str, s3: S3Options) -> str:
    """`path` itself when it is a directory on this node, else the cached copy of the model at
    that URL (downloaded first when this node has none)."""
    if not is_remote(path):
        return path
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    url = path.rstrip("/")
    target = _target(root, path)
    if (target / READY).is_file():
        return str(target)
    with open(root / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / READY).is_file():
            return str(target)
        store = S3BlobStore(url, s3, where="job")
        keys = store.list("")
        if not keys:
            raise FileNotFoundError(
                f"the base model {url} holds no files (config.json, weights, tokenizer); check "
                "the catalog entry's path"
            )
        log.info("downloading the base model %s (%d files) into %s", url, len(keys), target)
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=root))
        try:
            for key in keys:
                dest = tmp / key
                dest.parent.mkdir(parents=True, exist_ok=True)
                with store.open(key) as src, open(dest, "wb") as out:
                    shutil.copyfileobj(src, out, 1 << 20)
            (tmp / READY).write_text(url + "\n")
            shutil.rmtree(target, ignore_errors=True)
            os.replace(tmp, target)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return str(target)
