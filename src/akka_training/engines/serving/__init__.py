"""An endpoint's job side: the OpenAI API (`openai_api`: bodies in, bodies out) over the one
generation engine, served on the job's host by a small HTTP server (`http_server`). The
trainer's front door (``/openai/v1``) authenticates the caller and forwards to it, naming the
adapter in `ADAPTER_HEADER`."""

# The adapter (or `generation.BASE`) the front door resolved the request's `model` to.
ADAPTER_HEADER = "X-Akka-Adapter"
