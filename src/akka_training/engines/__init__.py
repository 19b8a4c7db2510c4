"""Training jobs: the entry point, the engine adapters (TRL, verl) and their helpers.

Nothing here imports the service, the controller or the storage layer: a job talks to the
service only over HTTP, through `akka_training.engines.reporter`.
"""
