"""``python -m mgegraph``: the ``mgegraph`` command line (``mgegraph.cli``)."""
import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
