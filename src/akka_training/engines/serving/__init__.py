"""An endpoint's job side: the OpenAI API (`openai_api`: bodies in, bodies out) over the one
generation engine, served on the job's host by a small HTTP server (`http_server`). The
trainer's front door (``/openai/v1``) authenticates the caller and forwards to it, naming the
adapter in `ADAPTER_HEADER`."""

from akka_training.core.serving import ADAPTER_HEADER, KEY_HEADER

__all__ = ["ADAPTER_HEADER", "KEY_HEADER"]
