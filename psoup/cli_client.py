"""The client subcommands of ``psoup`` (stream, ingest, register, invoke, ...), run on parsed args.

``psoup.cli`` parses the arguments (``psoup/cli/client.py``) and calls ``run``; each
command here opens a ``clients.PSoupClient``, makes its calls and prints with
``psoup.formatting``. ``run`` turns failures into a message on stderr and the exit status:

* 0: success
* 1: the server refused the request (``error: STATUS_CODE: message``), or the input
  file is bad
* 2: a bad ``--server`` address or ``--token`` (the rest of the usage errors come from
  argparse)
* 3: the server cannot be reached (``error: UNAVAILABLE: ...``)
* 130: interrupted (Ctrl-C)
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from clients import PSoupClient, PSoupRpcError, ResourceExhausted, Unavailable, batching, messages
from clients.errors import make_error
from psoup import formatting

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_UNREACHABLE, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
#: Batches ``psoup ingest`` reads ahead of the one being sent.
READ_AHEAD_BATCHES = 8


class UsageError(ValueError):
    """A bad connection option, found when the client is made (exit 2)."""


def connect(args: argparse.Namespace) -> PSoupClient:
    """A client for the connection options (``--server``, ``--token``, ...) of ``args``;
    UsageError for a malformed ``--server`` or ``--token``."""
    try:
        return PSoupClient(
            args.server, token=args.token, timeout=args.timeout, root_certificates=args.tls_ca
        )
    except ValueError as err:
        raise UsageError(str(err)) from None


def _print(text: str) -> None:
    if text:
        print(text, flush=True)


# ---------------------------------------------------------------------------- streams


def stream_create(c: PSoupClient, args: argparse.Namespace) -> int:
    info = c.create_stream(
        args.name, args.schema, args.time, args.max_window, partition_by=args.partition_by
    )
    window = "" if info.max_window is None else f", max_window {info.max_window}"
    spread = "" if info.partition_by is None else f", partitioned by {info.partition_by}"
    _print(
        f"created stream {info.name} ({formatting.schema_text(info.schema)}; "
        f"time {info.time}{window}{spread})"
    )
    return EXIT_OK


def stream_list(c: PSoupClient, args: argparse.Namespace) -> int:
    infos = c.list_streams()
    if args.format == "json":
        _print(formatting.to_json(infos))
    else:
        _print(formatting.streams_table(infos))
    return EXIT_OK


def stream_describe(c: PSoupClient, args: argparse.Namespace) -> int:
    info = c.describe_stream(args.name)
    if args.format == "json":
        _print(formatting.to_json(info))
    else:
        _print(formatting.stream_text(info))
    return EXIT_OK


def stream_drop(c: PSoupClient, args: argparse.Namespace) -> int:
    c.drop_stream(args.name)
    _print(f"dropped stream {args.name}")
    return EXIT_OK


def grant(c: PSoupClient, args: argparse.Namespace) -> int:
    info = c.grant(args.stream, args.client_id, args.right)
    _print(f"granted {args.right} on {args.stream} to {args.client_id}: {_grants(info)}")
    return EXIT_OK


def revoke(c: PSoupClient, args: argparse.Namespace) -> int:
    info = c.revoke(args.stream, args.client_id, args.right)
    _print(f"revoked {args.right} on {args.stream} from {args.client_id}: {_grants(info)}")
    return EXIT_OK


def _grants(info) -> str:
    return formatting.grants_text(info.grants) or "no grants left"


# ----------------------------------------------------------------------------- ingest


def _reuse_freed_memory() -> None:
    """Have glibc's malloc keep freed memory (up to 128 MiB) for the next allocations
    rather than give it back to the OS at once. Each batch allocates and frees a few
    hundred KB (its columns as bytes, the message, its serialized form); given back each
    time, they cost a page fault per 4 KB when allocated again, more CPU than the encoding
    itself. A no-op where the C library is not glibc."""
    import ctypes
    import ctypes.util

    m_trim_threshold, m_mmap_threshold = -1, -3  # glibc's malloc.h
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt(m_mmap_threshold, 32 << 20)  # glibc's largest: heap, not mmap, below
        libc.mallopt(m_trim_threshold, 128 << 20)
    except (OSError, AttributeError):
        pass


def ingest(c: PSoupClient, args: argparse.Namespace) -> int:
    """Send the file (CSV, Parquet or Arrow IPC: ``psoup.datafiles``) in batches over one
    Ingest call, with a progress bar over rows. The file is read a batch ahead on a thread
    while the batches before go out.

    A bad file stops the command with one ``error:`` line naming file, line or row, and
    column; the batches before the bad row were sent and stay (the server applies a batch
    whole or not at all), and the command says how many.

    Ctrl-C stops reading the file: the batches sent are acknowledged, the call ends and
    the command says how many rows went in (exit 130); a second Ctrl-C does not wait.
    """
    from tqdm import tqdm

    from psoup import datafiles

    _reuse_freed_memory()
    interrupted = threading.Event()

    def on_sigint(signum, frame) -> None:
        interrupted.set()
        signal.signal(signal.SIGINT, signal.default_int_handler)

    def batches():
        schema = batching.schema_of(info)
        for batch in datafiles.read_batches(
            args.file, schema, args.batch_rows, kind=kind, ahead=READ_AHEAD_BATCHES
        ):
            if interrupted.is_set():
                return
            yield batch

    rows = nbatches = matches = 0
    first = last = None
    previous = None
    try:
        info = c.describe_stream(args.name)
        kind = datafiles.detect(args.file)
        total = None if args.no_progress else datafiles.count_rows(args.file, kind)
        start = time.perf_counter()
        with tqdm(total=total, unit="row", disable=args.no_progress) as bar:
            previous = signal.signal(signal.SIGINT, on_sigint)
            for ack in _acks(c, args, batches()):
                nbatches += 1
                rows += ack.rows
                matches += ack.matches
                if ack.rows:
                    first = ack.first_tuple_id if first is None else first
                    last = ack.last_tuple_id
                bar.update(ack.rows)
    except KeyboardInterrupt:
        interrupted.set()
    except (PSoupRpcError, datafiles.DataFileError) as err:
        if nbatches:  # the acknowledged batches stay applied: say how far it got
            print(
                f"{formatting.plural(rows, 'row')} in {formatting.plural(nbatches, 'batch')} "
                "were ingested before the error",
                file=sys.stderr,
            )
        if isinstance(err, datafiles.DataFileError):
            print(f"error: {err}", file=sys.stderr)
            return EXIT_FAILED
        raise _batch_hint(err) from None
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    if interrupted.is_set():
        print(
            f"interrupted: {formatting.plural(rows, 'row')} in "
            f"{formatting.plural(nbatches, 'batch')} ingested",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    secs = time.perf_counter() - start
    ids = f"tuple ids {first}..{last}" if rows else "no tuple ids"
    _print(
        f"ingested {formatting.plural(rows, 'row')} in {formatting.plural(nbatches, 'batch')} "
        f"in {secs:.2f} s ({rows / max(secs, 1e-9):,.0f} rows/s); {ids}; "
        f"{formatting.plural(matches, 'match')}"
    )
    return EXIT_OK


def _acks(c: PSoupClient, args: argparse.Namespace, batches: Iterator[dict]) -> Iterator:
    """The acks of ``batches`` sent into ``args.name``: over the Ingest call of ``c``, or
    with ``--flight`` as Arrow record batches over Flight (clients/flight.py)."""
    if args.flight is None:
        yield from c.ingest(args.name, batches)
        return
    import pyarrow as pa

    from clients.flight import FlightIngester

    pem = Path(args.tls_ca).read_bytes() if args.tls_ca else None
    try:
        f = FlightIngester(args.flight, token=args.token, root_certificates=pem)
    except ValueError as err:
        raise UsageError(f"--flight: {err}") from None
    with f:
        yield from f.put(args.name, (pa.record_batch(b) for b in batches))


def _batch_hint(err: Exception) -> Exception:
    """``err``, with a hint when a batch was too big for the server or the channel."""
    if isinstance(err, ResourceExhausted) and (
        "max_batch_rows" in err.message or "larger than max" in err.message
    ):
        return make_error(err.code, f"{err.message} (lower --batch-rows)")
    return err


# ---------------------------------------------------------------------------- queries


def prepare(c: PSoupClient, args: argparse.Namespace) -> int:
    """Print the template id alone, so ``T=$(psoup prepare ...)`` works."""
    _print(c.prepare(args.query).id)
    return EXIT_OK


def register(c: PSoupClient, args: argparse.Namespace) -> int:
    """Print the handle alone, so ``H=$(psoup register ...)`` works."""
    query = args.query  # one of the two (psoup.cli checks)
    if args.template is not None:  # the server knows the template by its id alone
        query = messages.Template(args.template, "", (), ())
    _print(c.register(query, dict(args.param)))
    return EXIT_OK


def invoke(c: PSoupClient, args: argparse.Namespace) -> int:
    result = c.invoke(args.handle, now=args.now, page_rows=args.page_rows)
    _print(formatting.format_result(result, args.format))
    return EXIT_OK


def subscribe(c: PSoupClient, args: argparse.Namespace) -> int:
    """Print events as they arrive until Ctrl-C (exit 130) or the query is unregistered
    (exit 1, saying so).

    Ctrl-C cancels the call from a signal handler rather than relying on
    KeyboardInterrupt: raised while the main thread waits inside gRPC's stream iterator,
    the exception could be swallowed there and the command kept waiting for events.
    """
    sub = c.subscribe(args.handle, include_current=args.include_current)
    interrupted = threading.Event()

    def on_sigint(signum, frame) -> None:
        interrupted.set()
        sub.cancel()

    previous = signal.signal(signal.SIGINT, on_sigint)
    first = True
    try:
        for kind, result, first_tid in sub:
            _print(formatting.format_event(kind, result, first_tid, args.format, first))
            first = False
    except KeyboardInterrupt:  # only before the handler was in place
        sub.cancel()
        interrupted.set()
    finally:
        signal.signal(signal.SIGINT, previous)
    if interrupted.is_set():
        return EXIT_INTERRUPTED
    print(f"error: query {args.handle} was unregistered", file=sys.stderr)
    return EXIT_FAILED


def unregister(c: PSoupClient, args: argparse.Namespace) -> int:
    c.unregister(args.handle)
    _print(f"unregistered {args.handle}")
    return EXIT_OK


def describe(c: PSoupClient, args: argparse.Namespace) -> int:
    info = c.describe_query(args.handle)
    if args.format == "json":
        _print(formatting.to_json(info))
    else:
        _print(formatting.query_text(info))
    return EXIT_OK


def stats(c: PSoupClient, args: argparse.Namespace) -> int:
    s = c.stats()
    _print(formatting.to_json(s) if args.format == "json" else formatting.key_values(s))
    return EXIT_OK


def cluster_status(c: PSoupClient, args: argparse.Namespace) -> int:
    shards = c.stats()["shards"]
    if not shards:
        print("error: the server is not sharded (psoup serve --shards N)", file=sys.stderr)
        return EXIT_FAILED
    if args.format == "json":
        _print(formatting.to_json(shards))
        return EXIT_OK
    cols = ("shard", "state", "node", "pid", "tuples", "queries", "memory MB", "restarts")
    rows = [(h["index"], h["state"], h["node"], h["pid"], h["tuples_stored"], h["queries"],
             round(h["memory_bytes"] / 2**20, 1), h["restarts"]) for h in shards]  # fmt: skip
    _print(formatting.table(cols, rows))
    return EXIT_OK


def backup(c: PSoupClient, args: argparse.Namespace) -> int:
    r = c.backup(os.path.abspath(args.directory))
    _print(
        f"backed up to {r['directory']}: {r['bytes']:,} bytes as of log record {r['lsn']} "
        f"in {r['seconds']:.1f} s (start a server on it with psoup serve --data-dir)"
    )
    return EXIT_OK


def top(c: PSoupClient, args: argparse.Namespace) -> int:
    from psoup import top as view

    return view.run(c, refresh=args.refresh, seconds=args.for_seconds)


COMMANDS: dict[str, Callable[[PSoupClient, argparse.Namespace], int]] = {
    "stream create": stream_create,
    "stream list": stream_list,
    "stream describe": stream_describe,
    "stream drop": stream_drop,
    "grant": grant,
    "revoke": revoke,
    "ingest": ingest,
    "prepare": prepare,
    "register": register,
    "invoke": invoke,
    "subscribe": subscribe,
    "unregister": unregister,
    "describe": describe,
    "stats": stats,
    "cluster status": cluster_status,
    "backup": backup,
    "top": top,
}


def run(command: str, args: argparse.Namespace) -> int:
    """Run client ``command`` (a key of ``COMMANDS``); returns the exit status."""
    try:
        with connect(args) as c:
            return COMMANDS[command](c, args)
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except PSoupRpcError as err:
        print(f"error: {err.code.name}: {err.message}", file=sys.stderr)
        return EXIT_UNREACHABLE if isinstance(err, Unavailable) else EXIT_FAILED
    except OSError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_FAILED
