"""Without --shards nothing of the sharded engine is loaded: psoup.connect() and a server
without shards never import Ray (it takes seconds and hundreds of MB to start)."""

from __future__ import annotations

import subprocess
import sys


def test_one_engine_never_imports_ray() -> None:
    code = (
        "import sys, psoup, clients\n"
        "from psoup.server import ServerConfig, start_server\n"
        "db = psoup.connect(); db.create_stream('r', {'a': 'int', 't': 'int'}, time='t')\n"
        "srv = start_server(ServerConfig(port=0)); srv.stop(grace=0)\n"
        "print(sorted(m for m in ('ray', 'psoup.shard') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True)  # fmt: skip
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
