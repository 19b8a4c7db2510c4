"""The typed HTTP client of the trainer (used by the CLI, and by users from Python), and the
CLI's contexts file."""

from akka_training.client.api import TrainerClient

__all__ = ["TrainerClient"]
