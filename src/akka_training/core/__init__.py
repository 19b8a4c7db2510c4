"""Plans, phases, failure reasons and errors: the vocabulary every other layer shares.

Nothing in `core` imports another part of the package, so the CLI, the service and the jobs can
all depend on it.
"""
