"""The largest values the service accepts, as plain numbers (no pydantic: the CLI reads them
when it starts). `core.bounds` holds the field types built on them; docs/start-a-run.md (plans)
and docs/python-client.md (request bodies) list them for users."""

from __future__ import annotations

# Postgres INTEGER and BIGINT.
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
# A seed reaches numpy, which takes 0 .. 2**32-1.
SEED_MAX = 2**32 - 1

# Column lengths (storage.models), by what they hold.
NAME_CHARS = 64  # projects, datasets, pools, stages, snapshots, reward terms
MODEL_NAME_CHARS = 128  # run model names, base model ids, pipeline and token names
REFERENCE_CHARS = 256  # PROJECT/NAME:VERSION references
# Texts kept in TEXT columns or in the plan document: bounded so a plan stays small.
DESCRIPTION_CHARS = 4096
TEXT_CHARS = 16384  # a judge's instructions
PATTERN_CHARS = 4096
URL_CHARS = 2048

# Lists.
MAX_REWARD_TERMS = 64
MAX_TOOLS = 32
MAX_STAGES = 32
MAX_TARGET_MODULES = 256
MAX_HEADERS = 32
MAX_TOKEN_PROJECTS = 256

# Other numbers with a sense of scale.
MAX_EPOCHS = 10_000
# Hyperparameters past these are mistakes, not experiments: a learning rate of 1e308 made a
# run's gradients NaN at its second step (docs/start-a-run.md lists them).
MAX_LEARNING_RATE = 1.0
MAX_WEIGHT_DECAY = 1.0
MAX_TEMPERATURE = 10.0
MAX_KL_BETA = 10.0
MAX_CLIP_LOW = 1.0  # the ratio's floor is 1 - low
MAX_CLIP_HIGH = 10.0
MAX_TOKEN_DAYS = 3650  # ten years: a token's expiry must stay a date
# An hour: a token that expires sooner would be expired before anyone could use it.
MIN_TOKEN_DAYS = 1 / 24

# A plan document as text (the CLI reads it) or as a request body, and its YAML shape. Its
# fields' own limits keep a plan far smaller (64 judge terms of 16k instructions make 1 MiB).
MAX_PLAN_BYTES = 4 * 1024 * 1024
MAX_DOCUMENT_DEPTH = 32
# Values a document holds once every alias is expanded (a "billion laughs" stops here).
MAX_DOCUMENT_NODES = 100_000
# Problems one refusal lists; the rest are counted.
MAX_PROBLEMS = 50
