"""Keep training jobs off the network: no model hub, no library telemetry.

TRL's trainers report usage to the Hugging Face Hub from a background thread, and the Hub client
fetches files when a name is not a local path. A job only ever loads local directories and talks
only to its own service, so it sets the Hub's offline and no-telemetry switches before training.
"""

from __future__ import annotations

import os
import sys

SWITCHES = {
    "HF_HUB_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "DO_NOT_TRACK": "1",
}


def stay_offline() -> None:
    """Set the switches in the environment (read by libraries when imported, and by child
    processes) and, where the Hub client is imported already, in its constants too."""
    for name, value in SWITCHES.items():
        os.environ[name] = value
    constants = sys.modules.get("huggingface_hub.constants")
    if constants is not None:
        vars(constants).update(HF_HUB_OFFLINE=True, HF_HUB_DISABLE_TELEMETRY=True)
