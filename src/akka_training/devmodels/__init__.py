"""Development models: tiny random-weight models the project builds itself (no model hub), saved
in the ordinary Hugging Face layout, for tests and the demo.

``python -m akka_training.devmodels build DIR`` builds them and prints their catalog entries.
`akka_training.devmodels.build` needs the training stack; `akka_training.devmodels.catalog`
does not, so this package imports nothing heavy by itself.
"""
