"""The ``psoup`` client and server commands: parsing, formatting, CSV reading, and end to end.

Commands run in-process through ``psoup.cli.main`` against an in-process server, except
``subscribe`` (interrupted with SIGINT) and one test that drives ``psoup serve`` in a
subprocess with the other commands as subprocesses, as a user would.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from clients import PSoupClient
from psoup import cli, formatting
from psoup.datafiles import DataFileError, count_rows, read_batches
from psoup.server import ServerConfig, start_server
from psoup.values import Result

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = {"vid": "int", "spd": "int", "t": "int"}
DEADLINE = 60  # seconds any one subprocess step may take
JSON = ("--format", "json")


# ------------------------------------------------------------------- argument parsing


def _parsers(parser: argparse.ArgumentParser, path=()):
    """Every (command path, parser) under ``parser``."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, (*path, name))


def test_every_argument_has_help_and_every_help_runs(capsys) -> None:
    paths = []
    for path, parser in _parsers(cli.build_parser()):
        paths.append(path)
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                assert all(a.help for a in action._choices_actions), path
            else:
                assert action.help, (path, action.dest)
        with pytest.raises(SystemExit) as exc:
            cli.main([*path, "--help"])
        assert exc.value.code == 0
        assert "usage: psoup" in capsys.readouterr().out
    for cmd in ("serve", "ingest", "register", "invoke", "subscribe", "unregister", "describe"):
        assert (cmd,) in paths
    for action in ("create", "list", "describe", "drop"):
        assert ("stream", action) in paths


def test_schema_param_and_number_parsing() -> None:
    assert cli.parse_schema("vid:int, spd:float,t:int") == {
        "vid": "int",
        "spd": "float",
        "t": "int",
    }
    for bad in ("vid", "vid:int,", "a:int,a:int", ":int"):
        with pytest.raises(argparse.ArgumentTypeError):
            cli.parse_schema(bad)
    assert cli.parse_param("x=5") == ("x", 5)
    assert cli.parse_param("x=2.5") == ("x", 2.5)
    assert cli.parse_param("name=a=b") == ("name", "a=b")
    assert cli.parse_param("x=") == ("x", "")
    with pytest.raises(argparse.ArgumentTypeError):
        cli.parse_param("x")
    assert cli.parse_number("10") == 10 and cli.parse_number("-1.5") == -1.5
    with pytest.raises(argparse.ArgumentTypeError):
        cli.parse_number("inf")


def test_usage_errors_exit_2(capsys) -> None:
    for argv in (
        [],
        ["register"],
        ["register", "q", "--template", "t"],
        ["register", "q", "--param", "novalue"],
        ["stream", "create", "r", "--schema", "a:int"],
        ["invoke", "h", "--format", "xml"],
        ["serve", "--port", "70000"],
        ["serve", "--tls-cert", "cert.pem"],
        ["serve", "--cpus", "x"],
        ["serve", "--cpus", "100000"],
    ):
        with pytest.raises(SystemExit) as exc:
            cli.main(argv)
        assert exc.value.code == 2, argv
        assert "error" in capsys.readouterr().err


def test_token_defaults_to_environment(monkeypatch) -> None:
    monkeypatch.setenv("PSOUP_TOKEN", "from-env")
    assert cli.build_parser().parse_args(["stats"]).token == "from-env"
    assert cli.build_parser().parse_args(["stats", "--token", "t"]).token == "t"
    monkeypatch.delenv("PSOUP_TOKEN")
    args = cli.build_parser().parse_args(["stats"])
    assert args.token is None and args.server == "localhost:50051"


# ------------------------------------------------------------------------- formatting

RESULT = Result(
    ("vid", "name", "avg"), ("int", "str", "float"), [(1, "a", 2.5), (10, "bb", None)], 12, (2, 12)
)


def test_result_as_table_csv_json() -> None:
    assert formatting.format_result(RESULT, "table") == (
        "vid  name   avg\n"
        "---  ----  ----\n"
        "  1  a      2.5\n"
        " 10  bb    NULL\n"
        "(2 rows; NOW 12; window [2, 12])"
    )
    assert formatting.format_result(RESULT, "csv") == "vid,name,avg\n1,a,2.5\n10,bb,"
    assert json.loads(formatting.format_result(RESULT, "json")) == {
        "columns": ["vid", "name", "avg"],
        "types": ["int", "str", "float"],
        "rows": [[1, "a", 2.5], [10, "bb", None]],
        "now": 12,
        "window": [2, 12],
    }
    empty = Result(("c",), ("int",), [])
    assert formatting.format_result(empty, "table") == "c\n-\n(0 rows)"
    assert formatting.format_result(empty, "csv") == "c"
    with pytest.raises(ValueError, match="unknown format"):
        formatting.format_result(RESULT, "xml")


def test_subscription_events() -> None:
    one = Result(("a",), ("int",), [(1,)])
    assert formatting.format_event("current", one, 0, "text", True) == "a\n# current: 1 row\n1"
    assert formatting.format_event("new", one, 7, "text", False) == "# new from tuple 7: 1 row\n1"
    assert formatting.format_event("new", one, 7, "csv", True) == "a\n1"
    assert formatting.format_event("new", one, 7, "csv", False) == "1"
    event = json.loads(formatting.format_event("new", one, 7, "json", False))
    assert (event["kind"], event["first_tuple_id"], event["rows"]) == ("new", 7, [[1]])


def test_key_values_and_plurals() -> None:
    assert formatting.key_values({"a": 1, "b": {"c": 0.123456, "d": None}, "e": {}}) == (
        "a: 1\nb:\n  c: 0.123\n  d: -\ne: -"
    )
    assert formatting.plural(1, "batch") == "1 batch"
    assert formatting.plural(1200, "batch") == "1,200 batches"
    assert formatting.plural(0, "row") == "0 rows"


# ---------------------------------------------------------------------------- CSV input


def _lists(batches) -> list[dict[str, list]]:
    return [{name: values.tolist() for name, values in b.items()} for b in batches]


def test_csv_batches_follow_the_header(tmp_path) -> None:
    f = tmp_path / "r.csv"
    f.write_text("t,vid,spd\n1,5,50\n\n2,6,60\n3,7,70\n")
    assert count_rows(f) == 4  # the blank line counts; only a progress total
    assert _lists(read_batches(f, SCHEMA, 2)) == [
        {"t": [1, 2], "vid": [5, 6], "spd": [50, 60]},
        {"t": [3], "vid": [7], "spd": [70]},
    ]
    g = tmp_path / "g.csv"
    g.write_text("vid,spd,t\n1,1.5,2")
    assert _lists(read_batches(g, {"vid": "int", "spd": "float", "t": "int"}, 10)) == [
        {"vid": [1], "spd": [1.5], "t": [2]}
    ]
    assert count_rows(g) == 1


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "empty file"),
        ("vid,spd\n1,2\n", "no column for attribute(s) t"),
        ("vid,spd,t,x\n", "column 4 'x' is not an attribute"),
        ("vid,vid,t\n", "column 'vid' appears twice"),
        ("vid,spd,t\n1,2,3\n1,x,4\n", ":3: column 'spd': expected int, got 'x'"),
        ("vid,spd,t\n1,2\n", ":2: 2 fields, the header has 3"),
    ],
)
def test_csv_errors_name_line_and_column(tmp_path, content: str, message: str) -> None:
    f = tmp_path / "bad.csv"
    f.write_text(content)
    with pytest.raises(DataFileError, match=re.escape(message)):
        list(read_batches(f, SCHEMA, 10))


# ---------------------------------------------------------------- commands in-process


@pytest.fixture(scope="module")
def server():
    srv = start_server(ServerConfig(port=0))
    yield f"127.0.0.1:{srv.port}"
    srv.stop(grace=1)


_names = iter(range(10**6))


def run(capsys, server: str, *argv: str) -> tuple[int, str, str]:
    code = cli.main([*argv, "--server", server])
    out, err = capsys.readouterr()
    return code, out, err


def test_stream_commands(capsys, server) -> None:
    name = f"c{next(_names)}"
    schema = ("--schema", "vid:int,spd:int,t:int", "--time", "t")
    code, out, _ = run(capsys, server, "stream", "create", name, *schema, "--max-window", "100")
    assert code == 0
    assert out == f"created stream {name} (vid:int,spd:int,t:int; time t, max_window 100)\n"
    code, out, err = run(
        capsys, server, "stream", "create", name, "--schema", "a:int", "--time", "a"
    )
    assert code == 1 and out == ""
    assert err == f"error: ALREADY_EXISTS: stream '{name}' already exists\n"
    code, out, _ = run(capsys, server, "stream", "list")
    assert code == 0 and re.search(rf"^{name}\s+vid:int,spd:int,t:int\s+t\s+100\s+0", out, re.M)
    code, out, _ = run(capsys, server, "stream", "list", "--format", "json")
    assert any(s["name"] == name for s in json.loads(out))
    code, out, _ = run(capsys, server, "stream", "describe", name)
    assert code == 0 and "schema: vid:int,spd:int,t:int\n" in out and "last_ts: -\n" in out
    code, out, _ = run(capsys, server, "stream", "describe", name, "--format", "json")
    assert json.loads(out)["schema"] == SCHEMA
    assert run(capsys, server, "stream", "drop", name)[:2] == (0, f"dropped stream {name}\n")
    code, out, err = run(capsys, server, "stream", "describe", name)
    assert (code, out, err) == (1, "", f"error: NOT_FOUND: unknown stream '{name}'\n")


def test_ingest_register_invoke_describe_stats(capsys, server, tmp_path) -> None:
    name = f"c{next(_names)}"
    with PSoupClient(server) as c:
        c.create_stream(name, SCHEMA, time="t")
    f = tmp_path / "r.csv"
    f.write_text("vid,spd,t\n" + "".join(f"{i % 3},{i * 10},{i}\n" for i in range(10)))
    code, out, _ = run(capsys, server, "ingest", name, str(f), "--batch-rows", "4", "--no-progress")
    assert code == 0
    assert re.fullmatch(
        r"ingested 10 rows in 3 batches in [\d.]+ s \([\d,]+ rows/s\); tuple ids (\d+)\.\.(\d+); "
        r"0 matches\n",
        out,
    )
    first, last = map(int, re.search(r"tuple ids (\d+)\.\.(\d+)", out).groups())
    assert last - first == 9

    text = f"SELECT vid, spd FROM {name} WHERE spd > :x AND vid = :v BEGIN NOW - 5 END NOW"
    code, out, _ = run(capsys, server, "register", text, "--param", "x=40", "--param", "v=2")
    handle = out.strip()
    assert code == 0 and out == handle + "\n" and re.fullmatch(r"[0-9a-f]{32}", handle)

    code, out, _ = run(capsys, server, "invoke", handle, "--format", "json")
    assert json.loads(out) == {
        "columns": ["vid", "spd"],
        "types": ["int", "int"],
        "rows": [[2, 50], [2, 80]],
        "now": 9,
        "window": [4, 9],
    }
    code, out, _ = run(capsys, server, "invoke", handle, "--format", "csv", "--page-rows", "1")
    assert out == "vid,spd\n2,50\n2,80\n"
    code, out, _ = run(capsys, server, "invoke", handle, "--now", "6")
    assert out.splitlines() == ["vid  spd", "---  ---", "  2   50", "(1 row; NOW 6; window [1, 6])"]

    code, out, _ = run(capsys, server, "describe", handle)
    assert code == 0 and f"text: {text}\n" in out and "params:\n  v: 2\n  x: 40\n" in out
    assert "window: BEGIN NOW - 5 END NOW\n" in out and "invocations: 3\n" in out
    code, out, _ = run(capsys, server, "stats", "--format", "json")
    assert json.loads(out)["streams"][name]["tuples_ingested"] == 10
    code, out, _ = run(capsys, server, "stats")
    assert code == 0 and "strategy: psoup-p\n" in out and f"  {name}:\n" in out

    assert run(capsys, server, "unregister", handle)[:2] == (0, f"unregistered {handle}\n")
    for argv in (("invoke", handle), ("describe", handle), ("unregister", handle)):
        assert run(capsys, server, *argv) == (1, "", "error: NOT_FOUND: unknown query handle\n")


def test_prepare_and_register_a_template(capsys, server) -> None:
    name = f"c{next(_names)}"
    with PSoupClient(server) as c:
        c.create_stream(name, SCHEMA, time="t")
        c.insert(name, [(i % 3, i * 10, i) for i in range(10)])
    text = f"SELECT vid, spd FROM {name} WHERE vid = :v BEGIN 0 END NOW"
    code, out, _ = run(capsys, server, "prepare", text)
    tid = out.strip()
    assert code == 0 and re.fullmatch(r"[0-9a-f]{32}", tid)
    for v in (1, 2):
        code, out, _ = run(capsys, server, "register", "--template", tid, "--param", f"v={v}")
        handle = out.strip()
        assert code == 0 and re.fullmatch(r"[0-9a-f]{32}", handle)
        code, out, _ = run(capsys, server, "invoke", handle, "--format", "csv")
        assert out.splitlines()[1:] == [f"{v},{i * 10}" for i in range(10) if i % 3 == v]
    code, out, err = run(capsys, server, "register", "--template", "0" * 32, "--param", "v=1")
    assert (code, out, err) == (
        1,
        "",
        f"error: NOT_FOUND: template_id '{'0' * 32}' is not prepared\n",
    )
    for argv in (("register", "--param", "v=1"), ("register", text, "--template", tid)):
        with pytest.raises(SystemExit) as exc:
            run(capsys, server, *argv)
        err = capsys.readouterr().err
        assert exc.value.code == 2 and "the query text or --template ID, not both" in err
    code, _, err = run(capsys, server, "register", "--template", tid, "--param", "v=x")
    assert code == 1 and "parameter :v, a str" in err and err.count("\n") == 3  # with a caret


def test_command_errors(capsys, server, tmp_path) -> None:
    name = f"c{next(_names)}"
    with PSoupClient(server) as c:
        c.create_stream(name, SCHEMA, time="t")
    code, out, err = run(capsys, server, "register", f"SELECT vid FROM {name} WHERE")
    assert code == 1 and out == ""
    col = len(f"SELECT vid FROM {name} WHERE") + 1
    assert err.startswith(f"error: INVALID_ARGUMENT: line 1, column {col}: expected")

    f = tmp_path / "bad.csv"
    f.write_text("vid,spd,t\n1,2,3\n1,2,4\n1,x,5\n")
    code, out, err = run(
        capsys, server, "ingest", name, str(f), "--batch-rows", "1", "--no-progress"
    )
    assert (code, out) == (1, "")
    assert err.endswith(f"error: {f}:4: column 'spd': expected int, got 'x'\n")
    assert "2 rows in 2 batches were ingested before the error" in err
    f.write_text("vid,spd,t\n1,2,1\n")  # older than the stream's latest time: server refuses
    code, _, err = run(capsys, server, "ingest", name, str(f), "--no-progress")
    assert code == 1 and "error: INVALID_ARGUMENT: batch 0" in err and "must not decrease" in err
    code, _, err = run(capsys, server, "ingest", name, str(tmp_path / "missing.csv"))
    assert code == 1 and err.startswith("error: ") and "missing.csv" in err
    code, _, err = run(capsys, server, "ingest", "no_such_stream", str(f))
    assert (code, err) == (1, "error: NOT_FOUND: unknown stream 'no_such_stream'\n")


def test_unreachable_server_exits_3(capsys) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code, out, err = run(capsys, f"127.0.0.1:{port}", "stream", "list")
    assert (code, out) == (3, "") and err.startswith("error: UNAVAILABLE: ")


def test_token_from_environment_authenticates(capsys, tmp_path, monkeypatch) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("alice:secret\n")
    srv = start_server(ServerConfig(port=0, auth_tokens_file=str(tokens)))
    try:
        target = f"127.0.0.1:{srv.port}"
        monkeypatch.delenv("PSOUP_TOKEN", raising=False)
        code, _, err = run(capsys, target, "stats")
        assert code == 1 and err.startswith("error: UNAUTHENTICATED: ")
        monkeypatch.setenv("PSOUP_TOKEN", "secret")
        assert run(capsys, target, "stats")[0] == 0
    finally:
        srv.stop(grace=1)


# ------------------------------------------------------------------------ subprocesses


class Lines:
    """A subprocess pipe read line by line on a thread, so every read has a deadline."""

    def __init__(self, pipe):
        self._q: queue.Queue = queue.Queue()
        threading.Thread(target=self._pump, args=(pipe,), daemon=True).start()

    def _pump(self, pipe) -> None:
        for line in pipe:
            self._q.put(line)
        self._q.put("")

    def next(self, timeout: float = DEADLINE) -> str:
        return self._q.get(timeout=timeout)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PSOUP_TOKEN", None)
    return env


def psoup_cli(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "psoup", *argv],
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        cwd=ROOT,
        env=_env(),
    )


def test_subscribe_prints_events_until_interrupted(server) -> None:
    with PSoupClient(server) as c:
        name = f"c{next(_names)}"
        c.create_stream(name, SCHEMA, time="t")
        c.insert(name, [(1, 50, 1)])
        h = c.register(f"SELECT vid, spd FROM {name} WHERE spd > 10 BEGIN 0 END NOW")
        srv = ("--server", server)
        proc = subprocess.Popen(
            [sys.executable, "-m", "psoup", "subscribe", h, "--include-current", *JSON, *srv],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env=_env(),
        )
        try:
            out = Lines(proc.stdout)
            current = json.loads(out.next())
            assert (current["kind"], current["rows"]) == ("current", [[1, 50]])
            res = c.insert(name, [(2, 5, 2), (3, 60, 3)])
            new = json.loads(out.next())
            assert (new["kind"], new["rows"], new["first_tuple_id"]) == (
                "new",
                [[3, 60]],
                res.first_id,
            )
            proc.send_signal(signal.SIGINT)
            assert proc.wait(timeout=2) == 130  # interrupted, at once
            assert "Traceback" not in proc.stderr.read()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


@pytest.mark.parametrize("round_", range(5))
def test_subscribe_exits_on_ctrl_c_while_waiting_for_events(server, round_) -> None:
    """Ctrl-C while the command waits inside gRPC's stream for an event that never comes
    (the case that sometimes hung): it exits within 2 s, status 130, no traceback."""
    with PSoupClient(server) as c:
        name = f"c{next(_names)}"
        c.create_stream(name, SCHEMA, time="t")
        h = c.register(f"SELECT vid FROM {name} BEGIN 0 END NOW")
        proc = subprocess.Popen(
            [sys.executable, "-m", "psoup", "subscribe", h, "--include-current", *JSON,
             "--server", server],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=_env(),
        )  # fmt: skip
        try:
            Lines(proc.stdout).next()  # the current result: the call is in place, waiting
            proc.send_signal(signal.SIGINT)
            assert proc.wait(timeout=2) == 130
            assert "Traceback" not in proc.stderr.read()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_serve_subprocess_driven_by_cli_subprocesses(tmp_path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "psoup", "serve", "--port", "0", "--data-dir", str(tmp_path / "d")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=_env(),
    )
    try:
        line = Lines(proc.stdout).next()
        m = re.fullmatch(r"psoup serving on 127\.0\.0\.1:(\d+)\n", line)
        assert m, line
        srv = ("--server", f"127.0.0.1:{m.group(1)}")

        schema = ("--schema", "vid:int,spd:int,t:int", "--time", "t")
        done = psoup_cli("stream", "create", "cars", *schema, *srv)
        assert done.returncode == 0, done.stderr
        csv_file = tmp_path / "cars.csv"
        csv_file.write_text("t,vid,spd\n1,1,50\n2,2,70\n3,3,80\n4,1,65\n")
        done = psoup_cli("ingest", "cars", str(csv_file), *srv)
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("ingested 4 rows in 1 batch in ")
        assert "tuple ids 0..3" in done.stdout

        query = "SELECT vid, spd FROM cars WHERE spd > :s BEGIN NOW - 2 END NOW"
        done = psoup_cli("register", query, "--param", "s=60", *srv)
        assert done.returncode == 0, done.stderr
        handle = done.stdout.strip()
        assert done.stdout == handle + "\n" and len(handle) == 32

        done = psoup_cli("invoke", handle, "--format", "json", *srv)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout) == {
            "columns": ["vid", "spd"],
            "types": ["int", "int"],
            "rows": [[2, 70], [3, 80], [1, 65]],
            "now": 4,
            "window": [2, 4],
        }

        done = psoup_cli("stream", "drop", "cars", *srv)  # a query still reads it
        assert done.returncode == 1 and done.stdout == ""
        assert done.stderr.startswith("error: FAILED_PRECONDITION: stream 'cars' is read by")

        done = psoup_cli("unregister", handle, *srv)
        assert (done.returncode, done.stdout) == (0, f"unregistered {handle}\n")
        done = psoup_cli("invoke", handle, *srv)
        assert (done.returncode, done.stderr) == (1, "error: NOT_FOUND: unknown query handle\n")

        done = psoup_cli("stats", "--format", "json", *srv)
        assert done.returncode == 0, done.stderr
        stats = json.loads(done.stdout)
        assert stats["queries"] == 0 and stats["streams"]["cars"]["tuples_ingested"] == 4

        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=DEADLINE) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
