"""Cluster backends: where training jobs run. `local` runs them as child processes of this
host (the embedded default); `ray` submits them to a Ray cluster. Each implements `Backend`."""
