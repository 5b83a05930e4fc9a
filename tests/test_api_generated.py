"""The generated gRPC code in psoup/api/ matches proto/psoup/v1/psoup.proto."""

from __future__ import annotations

from pathlib import Path

from psoup.api import generate


def test_generated_code_is_fresh() -> None:
    stale = [
        name
        for name, text in generate.generated_files().items()
        if (generate.OUT / name).read_text() != text
    ]
    assert not stale, f"stale: {stale}; run python3 -m psoup.api.generate"


def test_proto_documents_every_rpc() -> None:
    """Every RPC in the proto has a comment above it."""
    lines = Path(generate.PROTO).read_text().splitlines()
    undocumented = []
    for i, line in enumerate(lines):
        s = line.strip()
        if s.startswith("rpc ") and not lines[i - 1].strip().startswith("//"):
            undocumented.append(s)
    assert not undocumented, undocumented
