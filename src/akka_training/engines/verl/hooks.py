"""Save-and-stop inside verl: a checkpoint at the next step, on request.

verl 0.9.1 saves only every ``trainer.save_freq`` steps and offers no way to ask a running
trainer for a checkpoint. A pause with ``--checkpoint save`` needs one at the next optimizer
step, so the job loads this module into verl's processes through verl's own extension point
(``VERL_USE_EXTERNAL_MODULES``, imported at the end of ``import verl``) and replaces the V1
trainer registered as ``sync`` (``verl.trainer.ppo.v1.trainer_base.TRAINER_REGISTRY``) with a
subclass that, at the end of each step, looks for the request file named by
``AKKA_VERL_SAVE_REQUEST``. When it exists, the trainer saves a checkpoint (unless this step
already saved one) and makes this step its last: ``fit`` then logs the step's metrics and
returns, and ``main_ppo`` exits normally. The save happens where verl's own scheduled saves
happen: after the policy update, before the base class's end of step wakes the rollout engine
(vLLM) to load the new weights, so the checkpoint is written while vLLM holds no device memory.

Importing this module costs nothing: the subclass is installed only in the process that imports
verl's trainer module (the trainer's Ray actor), by an import hook.

This module runs inside verl's environment only.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from types import ModuleType
from typing import Any

SAVE_REQUEST_ENV = "AKKA_VERL_SAVE_REQUEST"
TRAINER_MODULE = "verl.trainer.ppo.v1.trainer_sync"


def install_trainer(module: ModuleType) -> type:
    """Register the save-on-request subclass of ``module.PPOTrainerSync`` as ``sync``."""
    # Imported here, once verl's trainer module exists: at module level they would load verl's
    # whole trainer into every verl process (and inside ``import verl`` itself).
    from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY
    from verl.utils.debug import marked_timer

    base: Any = module.PPOTrainerSync

    class SaveOnRequestTrainer(base):  # type: ignore[misc]
        """verl's synchronous trainer, plus a checkpoint and a stop when the job asks."""

        def on_step_end(self) -> None:
            # verl's own save point: fit() saves after the step's update and before this hook,
            # whose base wakes the rollout engine to load the new weights. A requested save
            # happens here too, before the base, while vLLM still holds none of its memory.
            request = os.environ.get(SAVE_REQUEST_ENV)
            if request and os.path.exists(request):
                step_dir = os.path.join(
                    self.config.trainer.default_local_dir, f"global_step_{self.global_steps}"
                )
                if not os.path.isdir(step_dir):
                    with marked_timer("save_checkpoint", self.timing_raw, color="green"):
                        self._save_checkpoint()
                # fit() loops while global_steps <= total_training_steps: this step is the last.
                self.total_training_steps = self.global_steps
            super().on_step_end()

    TRAINER_REGISTRY["sync"] = SaveOnRequestTrainer
    return SaveOnRequestTrainer


class _TrainerFinder(importlib.abc.MetaPathFinder):
    """Lets verl import its trainer module, then installs the subclass."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != TRAINER_MODULE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _InstallingLoader(spec.loader)
        return spec


class _InstallingLoader(importlib.abc.Loader):
    def __init__(self, loader: Any) -> None:
        self._loader = loader

    def create_module(self, spec: Any) -> Any:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        install_trainer(module)


def _register() -> None:
    if TRAINER_MODULE in sys.modules:
        install_trainer(sys.modules[TRAINER_MODULE])
    elif not any(isinstance(f, _TrainerFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _TrainerFinder())


_register()
