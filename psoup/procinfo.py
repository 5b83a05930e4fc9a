"""Facts about this process that servers and shards report."""

from __future__ import annotations

import os


def rss_bytes() -> int:
    """Resident set size of this process (0 where /proc is missing)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0
