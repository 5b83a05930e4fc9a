"""The metrics endpoint: a real server with ``metrics_port``, scraped over HTTP and
parsed with prometheus-client's own parser; refused requests are counted per client and
logged once, without the token."""

from __future__ import annotations

import json
import logging
import urllib.request
from pathlib import Path

import pyarrow as pa
import pytest
from prometheus_client.parser import text_string_to_metric_families

from clients import PSoupClient
from clients.errors import NotFound, PermissionDenied, Unauthenticated
from clients.flight import FlightIngester
from psoup.server import ServerConfig, logs, start_server


def _scrape(port: int) -> dict[tuple[str, tuple], float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


@pytest.fixture
def server(tmp_path: Path):
    tokens = tmp_path / "tokens"
    tokens.write_text("alice:a-secret\nbob:b-secret\n")
    srv = start_server(
        ServerConfig(port=0, metrics_port=0, auth_tokens_file=str(tokens),
                     data_dir=str(tmp_path / "d"), sync="batch")
    )  # fmt: skip
    yield srv
    srv.stop(grace=1)


def test_the_metrics_count_what_the_server_does(server, capsys) -> None:
    logs.configure("info", "json")
    target = f"127.0.0.1:{server.port}"
    with (
        PSoupClient(target, token="a-secret") as alice,
        PSoupClient(target, token="b-secret") as bob,
    ):
        alice.create_stream("r", {"a": "int", "t": "int"}, time="t")
        h = alice.register("SELECT a FROM r WHERE r.a >= 2 BEGIN 0 END NOW")
        alice.insert("r", [(1, 1), (2, 2), (3, 3)])
        alice.insert("r", [(4, 4)])
        for _ in range(5):
            alice.invoke(h)
        with pytest.raises(PermissionDenied):
            bob.invoke(h)
        with pytest.raises(PermissionDenied):
            bob.insert("r", [(5, 5)])
        m = _scrape(server.metrics_port)
    assert m[("psoup_tuples_ingested_total", (("stream", "r"),))] == 4
    assert m[("psoup_batches_total", (("stream", "r"),))] == 2
    assert m[("psoup_tuples_rejected_total", (("stream", "r"),))] == 1
    assert m[("psoup_tuples_stored", (("stream", "r"),))] == 4
    assert m[("psoup_standing_queries", (("stream", "r"),))] == 1
    assert m[("psoup_stream_bytes", (("stream", "r"),))] > 0
    assert m[("psoup_matches_marked_total", ())] == 3
    assert m[("psoup_ingest_queue_batches", ())] == 0
    assert m[("psoup_ingest_paused_seconds_total", ())] == server.servicer.turns.paused
    assert m[("psoup_subscriptions", ())] == 0
    assert m[("psoup_invoke_calls", ())] == 0
    assert m[("psoup_invoke_calls_taken_over_total", ())] == 0
    assert m[("psoup_invoke_seconds_count", (("strategy", "psoup-p"),))] == 5
    assert m[("psoup_requests_total", (("client", "alice"), ("method", "Invoke")))] == 5
    assert m[("psoup_denials_total", (("client", "bob"),))] == 2
    code = (("client", "bob"), ("code", "PERMISSION_DENIED"), ("method", "Invoke"))
    assert m[("psoup_refused_total", code)] == 1
    assert m[("psoup_log_flush_seconds_count", ())] >= 1
    assert m[("process_resident_memory_bytes", ())] > 10 << 20
    lines = [json.loads(x) for x in capsys.readouterr().err.splitlines() if x.startswith("{")]
    refused = [x for x in lines if x["event"] == "refused"]
    assert {(x["client"], x["method"], x["code"]) for x in refused} == {
        ("bob", "Invoke", "PERMISSION_DENIED"),
        ("bob", "Ingest", "PERMISSION_DENIED"),
    }
    assert all(set(x) >= {"time", "level", "reason"} for x in refused)
    assert not any("secret" in json.dumps(x) for x in lines)
    logging.getLogger("psoup").handlers.clear()


def test_flight_puts_are_counted_and_their_refusals_logged(tmp_path: Path, capsys) -> None:
    logs.configure("info", "json")
    tokens = tmp_path / "tokens"
    tokens.write_text("alice:a-secret\nbob:b-secret\n")
    srv = start_server(
        ServerConfig(port=0, metrics_port=0, flight_port=0, auth_tokens_file=str(tokens))
    )
    try:
        with PSoupClient(f"127.0.0.1:{srv.port}", token="a-secret") as alice:
            alice.create_stream("r", {"a": "int", "t": "int"}, time="t")
        target = f"127.0.0.1:{srv.flight_port}"
        with FlightIngester(target, token="a-secret") as f:
            for t0 in (0, 10):
                f.insert("r", pa.table({"a": [1, 2, 3], "t": [t0, t0 + 1, t0 + 2]}))
            with pytest.raises(NotFound):
                f.insert("nowhere", pa.table({"a": [1], "t": [1]}))
        for token, error in (("b-secret", PermissionDenied), ("nobody", Unauthenticated)):
            with FlightIngester(target, token=token) as f, pytest.raises(error):
                f.insert("r", pa.table({"a": [1], "t": [100]}))
        m = _scrape(srv.metrics_port)
    finally:
        srv.stop(grace=1)
    put = ("method", "DoPut")
    assert m[("psoup_requests_total", (("client", "alice"), put))] == 3
    assert m[("psoup_requests_total", (("client", "bob"), put))] == 1
    assert m[("psoup_requests_total", (("client", "unauthenticated"), put))] == 1
    assert m[("psoup_tuples_ingested_total", (("stream", "r"),))] == 6
    assert m[("psoup_batches_total", (("stream", "r"),))] == 2
    assert m[("psoup_denials_total", (("client", "bob"),))] == 1
    assert m[("psoup_denials_total", (("client", "unauthenticated"),))] == 1
    refusals = {
        (client, code): m.get(("psoup_refused_total", (("client", client), ("code", code), put)))
        for client, code in (("alice", "NOT_FOUND"), ("bob", "PERMISSION_DENIED"),
                             ("unauthenticated", "UNAUTHENTICATED"))
    }  # fmt: skip
    assert set(refusals.values()) == {1}, refusals
    lines = [json.loads(x) for x in capsys.readouterr().err.splitlines() if x.startswith("{")]
    refused = [x for x in lines if x["event"] == "refused"]
    assert {(x["client"], x["method"], x["code"]) for x in refused} == {
        ("alice", "DoPut", "NOT_FOUND"),
        ("bob", "DoPut", "PERMISSION_DENIED"),
        ("unauthenticated", "DoPut", "UNAUTHENTICATED"),
    }
    assert all("nowhere" in x["reason"] for x in refused if x["code"] == "NOT_FOUND")
    assert not any("secret" in json.dumps(x) for x in lines)
    logging.getLogger("psoup").handlers.clear()


def test_a_busy_metrics_port_refuses_to_start(server) -> None:
    with pytest.raises(
        RuntimeError, match=f"cannot serve metrics on 127.0.0.1:{server.metrics_port}"
    ):
        start_server(ServerConfig(port=0, metrics_port=server.metrics_port))


def test_each_checkpoint_is_logged_with_what_it_wrote(tmp_path: Path, capsys) -> None:
    """Every checkpoint (in the background every ``checkpoint_bytes`` of log, and the one
    written at a stop) is an info event with its record, how long it held the engine,
    its parts' seconds and the bytes it wrote, which are the bytes its directory holds."""
    logs.configure("info", "json")
    data = tmp_path / "d"
    srv = start_server(ServerConfig(port=0, data_dir=str(data), sync="batch",
                                    checkpoint_bytes=1))  # fmt: skip
    with PSoupClient(f"127.0.0.1:{srv.port}") as c:
        c.create_stream("r", {"a": "int", "t": "int"}, time="t")
        for t in range(5):
            c.insert("r", [(t, t)])
    srv.stop(grace=1)
    lines = [json.loads(x) for x in capsys.readouterr().err.splitlines() if x.startswith("{")]
    logging.getLogger("psoup").handlers.clear()
    done = [x for x in lines if x["event"] == "checkpoint"]
    assert len(done) >= 2  # at least one in the background, and the stop's
    assert [x["lsn"] for x in done] == sorted({x["lsn"] for x in done})
    assert all(set(x["parts"]) == {"streams", "states", "queries", "catalog"} for x in done)
    assert all(x["hold_seconds"] >= 0 and x["bytes_written"] > 0 for x in done)
    (last,) = (data / "checkpoints").iterdir()
    assert int(last.name, 16) == done[-1]["lsn"]
    assert done[-1]["bytes_written"] + done[-1]["bytes_linked"] == sum(
        p.stat().st_size for p in last.iterdir()
    )
    assert f"checkpoint at record {done[-1]['lsn']}: engine held" in done[-1]["message"]
