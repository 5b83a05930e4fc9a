"""Generate psoup/api/psoup_pb2*.py from proto/psoup/v1/psoup.proto with grpcio-tools.

``python3 -m psoup.api.generate`` rewrites the files in place; ``generated_files()``
returns what they should contain, for the staleness test. The generated gRPC module
imports its messages as ``psoup.v1``, which is not a package here; it is rewritten to
``psoup.api``.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROTO = ROOT / "proto" / "psoup" / "v1" / "psoup.proto"
OUT = Path(__file__).resolve().parent
NAMES = ("psoup_pb2.py", "psoup_pb2.pyi", "psoup_pb2_grpc.py")


def generated_files() -> dict[str, str]:
    """File name -> content that protoc generates from the proto file now."""
    from grpc_tools import protoc

    with tempfile.TemporaryDirectory() as tmp:
        args = [
            "protoc",
            f"-I{ROOT / 'proto'}",
            f"--python_out={tmp}",
            f"--pyi_out={tmp}",
            f"--grpc_python_out={tmp}",
            str(PROTO.relative_to(ROOT / "proto")),
        ]
        if protoc.main(args) != 0:
            raise RuntimeError("protoc failed on " + str(PROTO))
        out = {}
        for name in NAMES:
            text = (Path(tmp) / "psoup" / "v1" / name).read_text()
            out[name] = text.replace(
                "from psoup.v1 import psoup_pb2", "from psoup.api import psoup_pb2"
            )
        return out


def main() -> int:
    """Write the generated files into psoup/api/."""
    for name, text in generated_files().items():
        (OUT / name).write_text(text)
        print(f"wrote {OUT / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
