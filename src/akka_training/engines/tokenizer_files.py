"""The tokenizer a run trains with, kept beside its adapters: a downloaded adapter carries the
tokenizer files and the chat template of its run (`runs download`), and a merged model its
tokenizer (`runs export --merged`), wherever the base model's directory is.

Every engine loads the processing class from the base model's directory
(`AutoTokenizer.from_pretrained`, or `AutoProcessor` for an image-text model); the job saves
the same one, once per run, under `core.blobkeys.tokenizer_prefix`.
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path

from akka_training.blobstore import BlobStore
from akka_training.core import blobkeys
from akka_training.core.resolved import BaseModelPin

log = logging.getLogger(__name__)


def store_tokenizer(store: BlobStore, run_id: str, base_model: BaseModelPin) -> list[str]:
    """Save the run's processing class under the run's tokenizer prefix, unless an earlier
    attempt did; the keys written. A tokenizer that does not load is left to the engine, which
    loads it next and fails with its own reason."""
    prefix = blobkeys.tokenizer_prefix(run_id)
    if store.list(prefix):
        return []
    try:
        with tempfile.TemporaryDirectory(prefix="akka-tokenizer-") as tmp:
            save_processing(base_model, Path(tmp))
            return store.put_dir(prefix, Path(tmp))
    except Exception as exc:  # a side product: the engine reports a base model that will not load
        log.warning("the tokenizer of %s was not stored: %s", base_model.path, exc)
        return []


def save_processing(base_model: BaseModelPin, directory: Path) -> None:
    """Write the base model's tokenizer (image-text: its processor) files into `directory`."""
    # Imported here: a job whose run's tokenizer is stored already (a resumed attempt) and the
    # verl engine's own process need none of transformers.
    from transformers import AutoProcessor, AutoTokenizer

    if base_model.modality == "image-text":
        AutoProcessor.from_pretrained(base_model.path).save_pretrained(directory)
    else:
        AutoTokenizer.from_pretrained(base_model.path).save_pretrained(directory)
