"""The command line's edges: a refused or failed command prints one line naming the
problem (``error: ...`` on stderr, after argparse's usage for a usage error), never a
traceback, and exits 2 for bad usage, 1 for a refused or failed command, 3 for an
unreachable server and 130 when interrupted.

``CASES`` is the table: argv (``{server}``, ``{small}``, ``{dead}`` and ``{dir}`` filled
in by the test), the exit status and a regular expression the message line must match.
The commands run in-process through ``psoup.cli.main``, except the rows marked
``SUBPROCESS`` (``psoup serve``, and a device that would be read forever if the check
failed) and the tests at the end (Ctrl-C, a server on IPv6, a subscription that ends).
"""

from __future__ import annotations

import asyncio
import gzip
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from clients import AsyncPSoupClient, PSoupClient
from clients.channel import target
from psoup import cli, connect
from psoup.errors import SchemaError
from psoup.server import ServerConfig, start_server

ROOT = Path(__file__).resolve().parent.parent
DEADLINE = 60  # seconds any one subprocess may take
USAGE, FAILED, UNREACHABLE, INTERRUPTED = 2, 1, 3, 130
SUBPROCESS = "subprocess"
LR_LINE = "0,{t},1,0,0,0,0,0,0,0,-1,-1,-1,-1,-1\n"  # a Linear Road position report at t
Q = "SELECT * FROM edges WHERE edges.a < :x BEGIN 0 END NOW"


# ------------------------------------------------------------------------ the fixtures


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server():
    srv = start_server(ServerConfig(port=0))
    target_ = f"127.0.0.1:{srv.port}"
    with PSoupClient(target_) as c:
        c.create_stream("edges", {"a": "int", "t": "int"}, time="t")
    yield target_
    srv.stop(grace=1)


@pytest.fixture(scope="module")
def small():
    """A server with small limits: 5 rows a batch, 4 KB a message."""
    srv = start_server(ServerConfig(port=0, max_batch_rows=5, max_message_bytes=4096))
    target_ = f"127.0.0.1:{srv.port}"
    with PSoupClient(target_) as c:
        c.create_stream("wide", {"a": "int", "s": "str", "t": "int"}, time="t")
    yield target_
    srv.stop(grace=1)


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    """The bad inputs of the table, in one directory."""
    d = tmp_path_factory.mktemp("edges")
    (d / "binary.csv").write_bytes(b"a,t\n" + bytes(range(256)) * 4)
    (d / "latin1.csv").write_bytes("a,t\n1,2\n3,caf\xe9\n".encode("latin-1"))
    (d / "rows.csv.gz").write_bytes(gzip.compress(b"a,t\n1,2\n"))
    (d / "bigfield.csv").write_text('a,t\n1,2\n"' + "x" * 140_000 + '",3\n')
    (d / "late_nul.csv").write_bytes(b"a,t\n" + b"1,2\n" * 20_000 + b"3,\x004\n")
    (d / "folder").mkdir()
    (d / "notparquet.parquet").write_text("a,t\n1,2\n")
    (d / "torn.parquet").write_bytes(b"PAR1" + bytes(range(256)))  # no footer
    (d / "twenty.csv").write_text("a,s,t\n" + "".join(f"{i},x,{i}\n" for i in range(20)))
    (d / "fat.csv").write_text("a,s,t\n" + "".join(f"{i},{'y' * 3000},{i}\n" for i in range(2)))
    (d / "tokens.bin").write_bytes(bytes(range(256)))
    (d / "garbage.pem").write_bytes(os.urandom(512))
    (d / "lr.dat").write_text(LR_LINE.format(t=0))
    (d / "lr_bad.dat").write_text(LR_LINE.format(t=0) + "0,1,1,0\n")
    (d / "lr_tail.dat").write_text(LR_LINE.format(t=0) + "0,x\n")
    (d / "lr_order.dat").write_text(LR_LINE.format(t=5) + LR_LINE.format(t=3))
    (d / "answers").mkdir()
    return d


# -------------------------------------------------------------------------- the table

CASES = [
    # tokens and addresses: refused before anything is sent
    (["stats", "--token", "tok\u00e9n", "--server", "{server}"], USAGE,
     r"^error: bad token: only printable ASCII characters are allowed, not 'é'$"),
    (["stats", "--token", "to\nken", "--server", "{server}"], USAGE,
     r"^error: bad token: .* not '\\n'$"),
    (["stats", "--server", "127.0.0.1:99999"], USAGE,
     r"^error: bad server address '127\.0\.0\.1:99999': the port must be a number in 1\.\.65535$"),
    (["stats", "--server", "127.0.0.1:-1"], USAGE, r"^error: bad server address .*1\.\.65535"),
    (["stats", "--server", "127.0.0.1:0"], USAGE, r"^error: bad server address .*1\.\.65535"),
    (["stats", "--server", "127.0.0.1:"], USAGE, r"^error: bad server address .*1\.\.65535"),
    (["stats", "--server", "127.0.0.1:http"], USAGE, r"^error: bad server address .*1\.\.65535"),
    (["stats", "--server", ":50051"], USAGE, r"^error: bad server address ':50051': no host"),
    (["stats", "--server", "::1"], USAGE,
     r"^error: bad server address '::1': put an IPv6 address in brackets, e\.g\. \[::1\]:50051$"),
    (["stats", "--server", "[::1"], USAGE,
     r"^error: bad server address '\[::1': expected \[IPv6\]"),
    (["stats", "--server", "[::1]50051"], USAGE, r"^error: bad server address .*\[IPv6\]:PORT"),
    (["--server", "a:b:c", "stream", "list"], USAGE, r"^error: bad server address 'a:b:c'"),
    (["linear-road", "run", "--input", "{dir}/lr.dat", "--out", "{dir}/lr_out", "--server",
      "localhost:70000"], USAGE, r"^error: bad server address 'localhost:70000'"),
    (["history", "export", "--stream", "s", "--out", "{dir}/parquet", "--server", "h:0"], USAGE,
     r"^error: bad server address 'h:0'"),
    (["stats", "--timeout", "1e300", "--server", "{server}"], USAGE,
     r"argument --timeout: '1e300' is more than a year \(31536000 s\)$"),
    (["stats", "--timeout", "nan", "--server", "{server}"], USAGE,
     r"argument --timeout: 'nan': NaN and infinity are not allowed values$"),
    # numbers beyond what the wire carries
    (["register", Q, "--param", "x=99999999999999999999999", "--server", "{server}"], USAGE,
     r"argument --param: '99999999999999999999999' is beyond the 64-bit integer range"),
    (["register", Q, "--param", "x=-9223372036854775809", "--server", "{server}"], USAGE,
     r"argument --param: .* is beyond the 64-bit integer range"),
    (["invoke", "h", "--page-rows", "99999999999999999999999", "--server", "{server}"], USAGE,
     r"argument --page-rows: '99999999999999999999999' is more than 4294967295$"),
    (["invoke", "h", "--page-rows", "4294967296", "--server", "{server}"], USAGE,
     r"argument --page-rows: '4294967296' is more than 4294967295$"),
    (["invoke", "h", "--now", "1" + "0" * 30, "--server", "{server}"], USAGE,
     r"argument --now: .* is beyond the 64-bit integer range"),
    (["serve", "--max-message-bytes", "99999999999999"], USAGE,
     r"argument --max-message-bytes: '99999999999999' is more than 2147483647$"),
    (["serve", "--max-message-bytes", "2147483648"], USAGE,
     r"argument --max-message-bytes: .* is more than 2147483647$"),
    # parameters
    (["register", Q, "--param", "x=nan", "--server", "{server}"], USAGE,
     r"argument --param: 'nan': NaN and infinity are not allowed values$"),
    (["register", Q, "--param", "x=-Infinity", "--server", "{server}"], USAGE,
     r"argument --param: '-Infinity': NaN and infinity are not allowed values$"),
    (["register", Q, "--param", "x=1", "--param", "x=2", "--server", "{server}"], USAGE,
     r"argument --param: parameter 'x' is given twice$"),
    # declarations
    (["stream", "create", "r", "--schema", "a:bogus,t:int", "--time", "t", "--server",
      "{server}"], USAGE,
     r"argument --schema: attribute 'a' has unknown type 'bogus'; types are int, float, str$"),
    (["stream", "create", "select", "--schema", "a:int,t:int", "--time", "t", "--server",
      "{server}"], FAILED,
     r"^error: INVALID_ARGUMENT: bad stream name 'select': it is a reserved word"),
    (["stream", "create", "From", "--schema", "a:int,t:int", "--time", "t", "--server",
      "{server}"], FAILED, r"bad stream name 'From': it is a reserved word"),
    (["stream", "create", "r", "--schema", "where:int,t:int", "--time", "t", "--server",
      "{server}"], FAILED, r"bad attribute name 'where': it is a reserved word"),
    (["stream", "create", "r", "--schema", "a:int,or:int,t:int", "--time", "t", "--server",
      "{server}"], FAILED, r"bad attribute name 'or': it is a reserved word"),
    (["stream", "create", "r", "--schema", "a:int,now:int", "--time", "now", "--server",
      "{server}"], FAILED, r"bad attribute name 'now': it is a reserved word"),
    (["stream", "create", "r", "--schema", "between:int,t:int", "--time", "t", "--server",
      "{server}"], FAILED, r"bad attribute name 'between': it is a reserved word"),
    # an extra argument: the subcommand's own usage and message
    (["stats", "extra", "--server", "{server}"], USAGE,
     r"^psoup stats: error: unrecognized arguments: extra$"),
    (["stream", "list", "--format", "json", "extra"], USAGE,
     r"^psoup stream list: error: unrecognized arguments: extra$"),
    (["demo", "--seconds", "10", "extra"], USAGE,
     r"^psoup demo: error: unrecognized arguments: extra$"),
    (["linear-road", "check", "--input", "x", "--out", "y", "z"], USAGE,
     r"^psoup linear-road check: error: unrecognized arguments: z$"),
    # nonsense numbers
    (["demo", "--seconds", "-1"], USAGE, r"argument --seconds: not a positive integer: '-1'$"),
    (["demo", "--sensors", "0"], USAGE, r"argument --sensors: not a positive integer: '0'$"),
    (["linear-road", "run", "--input", "{dir}/lr.dat", "--out", "{dir}/lr_out", "--speedup",
      "0"], USAGE, r"argument --speedup: not a positive number: '0'$"),
    (["bench", "linear-road", "--xways", "1", "--speedup", "inf"], USAGE,
     r"argument --speedup: 'inf': NaN and infinity are not allowed values$"),
    (["bench", "linear-road", "--xways", "1", "--server-cpus", "0-x"], USAGE,
     r"argument --server-cpus: '0-x' is not a CPU number or a range a-b of them$"),
    (["bench", "linear-road", "--xways", "1", "--driver-cpus", "4096", "--out", "{dir}/b"],
     USAGE, r"bench linear-road: --driver-cpus: 4096: not a CPU this process may use"),
    # ingest: files that are not CSV text
    (["ingest", "edges", "{dir}/binary.csv", "--no-progress", "--server", "{server}"], FAILED,
     r"^error: .*binary\.csv: a binary file, not CSV text \(NUL byte at offset 4\)$"),
    (["ingest", "edges", "{dir}/latin1.csv", "--no-progress", "--server", "{server}"], FAILED,
     r"^error: .*latin1\.csv:3: not UTF-8 text \(byte 0xe9 at offset 13\)$"),
    (["ingest", "edges", "{dir}/rows.csv.gz", "--no-progress", "--server", "{server}"], FAILED,
     r"^error: .*rows\.csv\.gz: gzip-compressed, not CSV text \(decompress it first\)$"),
    (["ingest", "edges", "{dir}/bigfield.csv", "--no-progress", "--server", "{server}"], FAILED,
     r"^error: .*bigfield\.csv:3: field larger than field limit \(131072\)$"),
    (["ingest", "edges", "{dir}/late_nul.csv", "--batch-rows", "100000", "--no-progress",
      "--server", "{server}"], FAILED,
     r"^error: .*late_nul\.csv:20002: column 't': expected int, got '\\x004'$"),
    (["ingest", "edges", "{dir}/folder", "--no-progress", "--server", "{server}"], FAILED,
     r"^error: .*folder: a directory, not a CSV, Parquet or Arrow file$"),
    (["ingest", "edges", "{dir}/notparquet.parquet", "--no-progress", "--server", "{server}"],
     FAILED, r"^error: .*notparquet\.parquet: not a Parquet file \(it does not start with PAR1\)$"),
    (["ingest", "edges", "{dir}/torn.parquet", "--no-progress", "--server", "{server}"], FAILED,
     r"^error: .*torn\.parquet: not a readable Parquet file: "),
    (["ingest", "edges", "/dev/zero", "--no-progress", "--server", "{server}"], FAILED,
     r"^error: /dev/zero: not a regular file but a device or a pipe", SUBPROCESS),
    # ingest: a batch over the server's limits says what to lower
    (["ingest", "wide", "{dir}/twenty.csv", "--no-progress", "--server", "{small}"], FAILED,
     r"^error: RESOURCE_EXHAUSTED: batch 0: 20 rows exceed max_batch_rows=5 "
     r"\(lower --batch-rows\)$"),
    (["ingest", "wide", "{dir}/fat.csv", "--no-progress", "--server", "{small}"], FAILED,
     r"^error: RESOURCE_EXHAUSTED: .*larger than max .* \(lower --batch-rows\)$"),
    # serve: files it cannot use
    (["serve", "--port", "0", "--in-memory", "--tls-cert", "{dir}/garbage.pem", "--tls-key",
      "{dir}/garbage.pem"], FAILED,
     r"^error: --tls-cert .*garbage\.pem: cannot read it as a PEM certificate$", SUBPROCESS),
    (["serve", "--port", "0", "--in-memory", "--tls-cert", "{dir}/none.pem", "--tls-key",
      "{dir}/garbage.pem"], FAILED,
     r"^error: --tls-cert .*none\.pem: No such file or directory$", SUBPROCESS),
    (["serve", "--port", "0", "--in-memory", "--auth-tokens", "{dir}/tokens.bin"], FAILED,
     r"^error: .*tokens\.bin: not a text file of client-id:token lines$", SUBPROCESS),
    # Linear Road: inputs and the server checked before the run
    (["linear-road", "generate", "--out", "{dir}/folder", "--duration", "10"], USAGE,
     r"^error: --out .*folder is a directory: give a file to write$"),
    (["bench", "core", "--quick", "--out", "{dir}/lr.dat"], FAILED,
     r"^error: --out .*lr\.dat: not a folder$"),
    (["bench", "linear-road", "--input", "{dir}/missing.dat", "--out", "{dir}/bench"], FAILED,
     r"^error: --input .*missing\.dat: no such file$"),
    (["linear-road", "run", "--input", "{dir}/missing.dat", "--out", "{dir}/lr_out",
      "--server", "{server}"], FAILED, r"^error: --input .*missing\.dat: no such file$"),
    (["linear-road", "run", "--input", "{dir}/lr.dat", "--history", "{dir}/folder", "--out",
      "{dir}/lr_out", "--server", "{server}"], FAILED,
     r"^error: --history .*folder: not a regular file$"),
    (["linear-road", "run", "--input", "{dir}/lr_tail.dat", "--out", "{dir}/lr_out",
      "--server", "{server}"], FAILED,
     r"^error: .*lr_tail\.dat: not 15 integers per line: line 2: '0,x'$"),
    (["linear-road", "run", "--input", "{dir}/lr.dat", "--out", "{dir}/lr_out", "--server",
      "{dead}"], UNREACHABLE, r"^error: UNAVAILABLE: "),
    (["linear-road", "run", "--input", "{dir}/lr.dat", "--out", "{dir}/lr_out", "--server",
      "{server}"], FAILED,
     r"^error: the server at .* has no Linear Road streams: start it with psoup serve "
     r"--linear-road$"),
    (["linear-road", "check", "--input", "{dir}/lr_bad.dat", "--out", "{dir}/answers"], FAILED,
     r"^error: .*lr_bad\.dat: not 15 integers per line: line 2: '0,1,1,0'$"),
    (["linear-road", "check", "--input", "{dir}/lr_order.dat", "--out", "{dir}/answers"],
     FAILED, r"^error: .*lr_order\.dat: the input is not in time order: line 2: time 3 after 5$"),
    (["linear-road", "check", "--input", "{dir}/missing.dat", "--out", "{dir}/answers"], FAILED,
     r"^error: --input .*missing\.dat: no such file$"),
]  # fmt: skip


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PSOUP_TOKEN", None)
    return env


def _run(argv: list[str], capsys, subprocess_: bool) -> tuple[int, str]:
    if subprocess_:
        done = subprocess.run(
            [sys.executable, "-m", "psoup", *argv],
            capture_output=True,
            text=True,
            timeout=DEADLINE,
            cwd=ROOT,
            env=_env(),
        )
        return done.returncode, done.stderr
    try:
        code = cli.main(argv)
    except SystemExit as exc:  # argparse
        code = exc.code
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "status", "message", "how"),
    [(*case, None)[:4] for case in CASES],
    ids=[" ".join(case[0])[:60] for case in CASES],
)
def test_one_line_and_the_exit_status(
    request, capsys, monkeypatch, files, argv, status, message, how
) -> None:
    monkeypatch.delenv("PSOUP_TOKEN", raising=False)
    places = {"dir": str(files), "dead": f"127.0.0.1:{_free_port()}"}
    for name in ("server", "small"):
        if any(f"{{{name}}}" in a for a in argv):
            places[name] = request.getfixturevalue(name)
    argv = [a.format(**places) if "{" in a else a for a in argv]
    code, err = _run(argv, capsys, how == SUBPROCESS)
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert lines, f"no message; exit {code}"
    # One line names the problem; argparse's usage lines may come before it.
    assert all(ln.startswith(("usage: ", " ")) for ln in lines[:-1]), err
    assert re.search(message, lines[-1]), lines[-1]
    assert "error: " in lines[-1]
    assert code == status, err


# ---------------------------------------------------------------- beyond the table


def test_client_library_refuses_a_bad_token_or_address_before_sending() -> None:
    assert target("localhost") == "localhost:50051"
    assert target("[::1]") == "[::1]:50051"
    assert target("[::1]:7000") == "[::1]:7000"
    assert target("unix:/tmp/psoup.sock") == "unix:/tmp/psoup.sock"
    for bad in ("h:65536", "h:0", "h:-1", ":1", "::1", "[::1]x", ""):
        with pytest.raises(ValueError, match="bad server address"):
            PSoupClient(bad)
    with pytest.raises(ValueError, match=r"bad token: .*not '\\n'"):
        PSoupClient("localhost:1", token="a\nb")
    with pytest.raises(ValueError, match=r"bad token: .*not 'ü'"):
        PSoupClient("localhost:1", token="tüt")

    async def make(token: str) -> None:
        AsyncPSoupClient("localhost:1", token=token)

    with pytest.raises(ValueError, match="bad token"):
        asyncio.run(make("a\rb"))


def test_embedded_engine_refuses_reserved_words_as_names() -> None:
    with connect() as e:
        with pytest.raises(SchemaError, match="'select': it is a reserved word"):
            e.create_stream("select", {"a": "int", "t": "int"}, time="t")
        with pytest.raises(SchemaError, match="'Limit': it is a reserved word"):
            e.create_stream("r", {"Limit": "int", "t": "int"}, time="t")
        e.create_stream("selection", {"count": "int", "t": "int"}, time="t")  # not reserved


def test_csv_byte_order_mark_is_skipped(capsys, server, tmp_path) -> None:
    f = tmp_path / "bom.csv"
    f.write_bytes(b"\xef\xbb\xbfa,t\n1,1000\n")
    code = cli.main(["ingest", "edges", str(f), "--no-progress", "--server", server])
    out, err = capsys.readouterr()
    assert (code, err) == (0, "")
    assert out.startswith("ingested 1 row in 1 batch")


def test_tls_files_are_checked_before_the_server_starts(tmp_path) -> None:
    openssl = "/usr/bin/openssl" if Path("/usr/bin/openssl").exists() else None
    if openssl is None:
        pytest.skip("needs the openssl command to make a certificate")
    cert, key, other = tmp_path / "cert.pem", tmp_path / "key.pem", tmp_path / "other.pem"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
         "/CN=localhost", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=DEADLINE,
    )  # fmt: skip
    subprocess.run(
        [openssl, "genrsa", "-out", str(other), "2048"],
        check=True, capture_output=True, timeout=DEADLINE,
    )  # fmt: skip
    assert cli._tls_problem(str(cert), str(key)) is None
    assert re.fullmatch(
        r"--tls-key .*other\.pem: cannot read it as an unencrypted PEM private key of the "
        r"--tls-cert certificate",
        cli._tls_problem(str(cert), str(other)),
    )
    assert "cannot read it as a PEM certificate" in cli._tls_problem(str(key), str(key))


def test_serve_brackets_an_ipv6_host(capsys) -> None:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 loopback")
    proc = subprocess.Popen(
        [sys.executable, "-m", "psoup", "serve", "--host", "::1", "--port", "0", "--in-memory"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=_env(),
    )  # fmt: skip
    try:
        line = proc.stdout.readline()
        m = re.fullmatch(r"psoup serving on \[::1\]:(\d+)\n", line)
        assert m, line
        assert cli.main(["stats", "--server", f"[::1]:{m.group(1)}"]) == 0
        assert "strategy: psoup-p" in capsys.readouterr().out
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=DEADLINE) == 0
        assert "Traceback" not in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _popen(*argv: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "psoup", *argv],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=_env(),
    )  # fmt: skip


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def test_subscribe_says_when_its_query_is_unregistered(server) -> None:
    with PSoupClient(server) as c:
        h = c.register("SELECT a FROM edges BEGIN 0 END NOW")
        proc = _popen("subscribe", h, "--include-current", "--format", "json", "--server", server)
        try:
            assert proc.stdout.readline().startswith('{"kind": "current"')  # in place
            c.unregister(h)
            assert proc.wait(timeout=DEADLINE) == FAILED
            assert proc.stderr.read() == f"error: query {h} was unregistered\n"
        finally:
            _stop(proc)


@pytest.fixture
def sigint_default():
    """The children of the Ctrl-C tests find SIGINT's default action, as a terminal's
    Ctrl-C finds a foreground command, even when this suite itself was started with
    SIGINT ignored (a background job of a non-interactive shell, `.ci/run &`): an ignored
    SIGINT is inherited through exec, and Python then installs no KeyboardInterrupt."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)


def test_ctrl_c_during_ingest_says_how_far_it_got(server, tmp_path, sigint_default) -> None:
    """Interrupted, ingest stops reading, and what it reports went in is what the server
    has: nothing lost between the acknowledgements and the message."""
    with PSoupClient(server) as c:
        c.create_stream("interrupted", {"a": "int", "t": "int"}, time="t")
        f = tmp_path / "many.csv"
        f.write_text("a,t\n" + "".join(f"{i},{i}\n" for i in range(300_000)))
        proc = _popen("ingest", "interrupted", str(f), "--batch-rows", "1", "--server", server)
        try:
            deadline = time.monotonic() + DEADLINE
            while c.describe_stream("interrupted").tuples_ingested < 100:
                assert proc.poll() is None and time.monotonic() < deadline
                time.sleep(0.05)
            proc.send_signal(signal.SIGINT)
            assert proc.wait(timeout=DEADLINE) == INTERRUPTED
            err = proc.stderr.read()
            assert "Traceback" not in err and "KeyboardInterrupt" not in err
            m = re.search(r"\binterrupted: ([\d,]+) rows in ([\d,]+) batches ingested\n\Z", err)
            assert m, err
            rows = int(m.group(1).replace(",", ""))
            assert 100 <= rows < 300_000
            assert rows == c.describe_stream("interrupted").tuples_ingested
        finally:
            _stop(proc)


def test_ctrl_c_elsewhere_exits_130_in_one_line(tmp_path, sigint_default) -> None:
    out = tmp_path / "input.dat"
    proc = _popen("linear-road", "generate", "--out", str(out), "--duration", "10800")
    try:
        deadline = time.monotonic() + DEADLINE
        while not (out.exists() and out.stat().st_size):
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=DEADLINE) == INTERRUPTED
        err = proc.stderr.read()
        assert "Traceback" not in err and err.endswith("error: interrupted\n"), err
    finally:
        _stop(proc)
