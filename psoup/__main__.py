"""``python -m psoup``: the command line."""

import sys

from psoup.cli import main

sys.exit(main())
