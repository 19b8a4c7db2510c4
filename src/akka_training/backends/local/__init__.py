"""The local backend: each job is a child process of this host."""

from akka_training.backends.local.backend import LocalBackend

__all__ = ["LocalBackend"]
