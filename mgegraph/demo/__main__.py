"""``python -m mgegraph.demo [options]``: the same as ``mgegraph demo [options]``."""
import sys

from mgegraph.cli import main

if __name__ == "__main__":
    sys.exit(main(["demo", *sys.argv[1:]]))
