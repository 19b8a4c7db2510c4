from akka_training.cli.main import run

run()
