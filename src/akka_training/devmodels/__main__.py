"""``python -m akka_training.devmodels build DIR``: build the development models under DIR and
print their catalog entries as JSON."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from akka_training.devmodels.build import build_dev_models


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m akka_training.devmodels")
    commands = parser.add_subparsers(dest="command", required=True)
    build = commands.add_parser("build", help="build the development models and print the catalog")
    build.add_argument("dest", type=Path, help="directory to build the models under")
    args = parser.parse_args(argv)
    entries = build_dev_models(args.dest)
    json.dump(entries, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
