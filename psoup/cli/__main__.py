"""``python -m psoup.cli``: the command line, as ``python -m psoup``."""

import sys

from psoup.cli import main

if __name__ == "__main__":
    sys.exit(main())
