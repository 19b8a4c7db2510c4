"""The `akka` command. It talks to the trainer over HTTP only and never imports torch."""
