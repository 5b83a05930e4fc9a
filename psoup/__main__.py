"""``python -m psoup``: the command line."""

import sys

from psoup.cli import main

if __name__ == "__main__":
    sys.exit(main())
