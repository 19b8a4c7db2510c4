"""The Ray backend: each job is a Ray job on a Ray cluster (KubeRay on Kubernetes), submitted
through the dashboard's job API. Importing this package does not import Ray; constructing
`RayBackend` does (and says how to install it when it is missing)."""

from akka_training.backends.ray.backend import RayBackend, RayNotInstalled

__all__ = ["RayBackend", "RayNotInstalled"]
