"""``psoup serve``: its options, the check of the TLS files before the server starts, and
the run (``psoup.server``, imported only then)."""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path

from psoup.cli.args import (
    STRATEGIES,
    _cpus,
    _message_bytes,
    _port,
    _positive,
    _seconds_or_never,
    _share,
    _sync_mode,
)
from psoup.cli.checks import _error


def add_parser(sub) -> None:
    """Add ``serve`` to the subcommands ``sub``."""
    serve = sub.add_parser(
        "serve",
        help="run the gRPC server until SIGTERM or Ctrl-C",
        description="Run the psoup gRPC server. Prints 'psoup serving on HOST:PORT' once "
        "ready; on SIGTERM or Ctrl-C it drains in-flight calls and exits 0.",
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default: %(default)s)")
    serve.add_argument(
        "--port",
        type=_port,
        default=50051,
        help="port to bind; 0 picks a free one (default: %(default)s)",
    )
    serve.add_argument(
        "--metrics-port",
        type=_port,
        metavar="PORT",
        help="serve Prometheus metrics over HTTP at http://HOST:PORT/metrics (0 picks a "
        "free port, printed); default: none",
    )
    serve.add_argument(
        "--flight-port",
        type=_port,
        metavar="PORT",
        help="also take ingest as Arrow Flight DoPut on HOST:PORT, record batches into the "
        "stream the descriptor names, acked as Ingest acks (0 picks a free port, printed); "
        "default: none",
    )
    serve.add_argument(
        "--log-level",
        choices=("debug", "info", "warning", "error"),
        default="info",
        help="least important events logged on stderr (default: %(default)s; every refused "
        "request is an info event)",
    )
    serve.add_argument(
        "--log-format",
        choices=("text", "json"),
        default="text",
        help="text: 'psoup: ...' lines; json: one object per line with time, level, event "
        "and fields (default: %(default)s)",
    )
    serve.add_argument(
        "--strategy",
        choices=STRATEGIES,
        default="psoup-p",
        help="engine strategy (default: %(default)s)",
    )
    serve.add_argument(
        "--auth-tokens",
        metavar="FILE",
        help="require bearer tokens, read from FILE of 'client-id:token' lines",
    )
    serve.add_argument(
        "--app",
        metavar="NAME[=ARG]",
        help="run an application inside the server: an installed one by name (entry "
        "point group psoup.applications, e.g. linear-road=validator) or "
        "package.module:function",
    )
    serve.add_argument(
        "--linear-road",
        nargs="?",
        const="validator",
        choices=("validator", "every-crossing"),
        metavar="CONVENTION",
        help="short for --app linear-road=CONVENTION: declare Linear Road's streams and run "
        "its toll network on 'positions'; toll "
        "alerts once per vehicle, direction and segment as the original validator expects "
        "(validator, the default) or at every crossing as the spec's text says "
        "(every-crossing)",
    )
    where = serve.add_mutually_exclusive_group()
    where.add_argument(
        "--data-dir",
        metavar="DIR",
        type=Path,
        help="keep streams, tuples, queries and handles in DIR and recover them from it on "
        "start (default: $PSOUP_DATA_DIR, else $XDG_DATA_HOME/psoup, else "
        "~/.local/share/psoup); one server at a time per directory",
    )
    where.add_argument(
        "--in-memory",
        action="store_true",
        help="keep nothing: a restart starts empty",
    )
    serve.add_argument(
        "--shards",
        type=int,
        metavar="N",
        help="run the engine as N shards on Ray behind the same API (docs/SCALE_OUT.md); "
        "streams created with --partition-by are spread over them",
    )
    serve.add_argument(
        "--ray",
        metavar="ADDRESS",
        help="with --shards: join the Ray cluster at ADDRESS (default: start one for this "
        "server, logs in the data directory)",
    )
    serve.add_argument(
        "--sync",
        type=_sync_mode,
        default="batch",
        metavar="MODE",
        help="when a change is forced to disk: batch (before it is acknowledged, one fsync "
        "shared by concurrent clients; the default), interval=MS (every MS milliseconds: "
        "power loss may lose the last MS, a process crash nothing) or off (when the OS "
        "likes: safe from a process crash only); docs/DURABILITY.md",
    )
    serve.add_argument(
        "--checkpoint-every",
        type=_positive,
        default=256,
        metavar="MB",
        help="start a checkpoint once this much log was written since the last one; the log "
        "replayed at start is at most this long (default: %(default)s)",
    )
    serve.add_argument(
        "--cpus",
        type=_cpus,
        metavar="LIST",
        help="keep the server's threads (and the processes it starts: Ray's, with --shards) "
        "on these CPUs (0, 0,2 or 0-3): its threads share one interpreter lock, and on one "
        "CPU they hand it on without waking another, leaving the rest to its clients "
        "(Linux; default: the scheduler places them)",
    )
    serve.add_argument(
        "--shard-cpus",
        type=_cpus,
        metavar="LIST",
        help="with --shards: keep each shard's process on these CPUs of its node, the "
        "engine on a core of its own (with --cpus 0 --shard-cpus 1 on 2 cores: the "
        "front-end and local clients on CPU 0, the engine on CPU 1; default: the "
        "scheduler places them)",
    )
    serve.add_argument("--tls-cert", metavar="FILE", help="PEM certificate chain (needs --tls-key)")
    serve.add_argument("--tls-key", metavar="FILE", help="PEM private key (needs --tls-cert)")
    serve.add_argument(
        "--insecure",
        action="store_true",
        help="allow --auth-tokens without TLS on an address that is not loopback (the "
        "tokens then travel in clear: only on a network you trust)",
    )
    limits = serve.add_argument_group("limits")
    limits.add_argument(
        "--max-message-bytes",
        type=_message_bytes,
        default=64 << 20,
        metavar="N",
        help="largest gRPC message either way, at most 2**31-1 (default: %(default)s)",
    )
    limits.add_argument(
        "--max-batch-rows",
        type=_positive,
        default=1_000_000,
        metavar="N",
        help="most rows in one ingest batch (default: %(default)s)",
    )
    limits.add_argument(
        "--max-query-chars",
        type=_positive,
        default=10_000,
        metavar="N",
        help="longest query text (default: %(default)s)",
    )
    limits.add_argument(
        "--max-queries-per-client",
        type=_positive,
        default=100_000,
        metavar="N",
        help="most registered queries per client (default: %(default)s)",
    )
    limits.add_argument(
        "--max-batch-items",
        type=_positive,
        default=1_024,
        metavar="N",
        help="most registrations and invokes in one Batch call (default: %(default)s)",
    )
    limits.add_argument(
        "--max-invoke-calls",
        type=_positive,
        default=8,
        metavar="N",
        help="most Invokes calls open at once, each holding a handler thread "
        "(default: %(default)s)",
    )
    limits.add_argument(
        "--invoke-idle-seconds",
        type=_seconds_or_never,
        default=10.0,
        metavar="S",
        help="at --max-invoke-calls, a new Invokes call takes the place of the one idle "
        "longest if it has waited S seconds for a request; 0: never (default: %(default)s)",
    )
    limits.add_argument(
        "--max-templates",
        type=_positive,
        default=10_000,
        metavar="N",
        help="most prepared query templates, all clients together (default: %(default)s)",
    )
    limits.add_argument(
        "--max-staged-bytes",
        type=_positive,
        default=8 << 30,
        metavar="N",
        help="bytes all open bulk loads may stage together; a batch past it is refused "
        "(default: %(default)s, 8 GiB)",
    )
    limits.add_argument(
        "--ingest-queue-batches",
        type=_positive,
        default=64,
        metavar="N",
        help="batches waiting for the engine before ingest is refused (default: %(default)s)",
    )
    limits.add_argument(
        "--ingest-turns",
        type=_positive,
        default=1,
        metavar="N",
        help="ingest batches on their way to the engine at once, from all clients taking "
        "turns; more keeps more threads busy and interactive calls waiting "
        "(default: %(default)s)",
    )
    limits.add_argument(
        "--ingest-share",
        type=_share,
        default=0.5,
        metavar="FRACTION",
        help="while interactive calls (invoke, register, describe) arrive, ingest holds "
        "the engine at most this share of the time, so they do not wait behind a flood; "
        "1 = no limit (default: %(default)s)",
    )
    limits.add_argument(
        "--freeze-heap-every",
        type=_seconds_or_never,
        default=1.0,
        metavar="SECONDS",
        help="collect young garbage and freeze the rest this often, so that the collector "
        "never walks the whole heap of standing queries; 0 = never (default: %(default)s)",
    )


def _tls_problem(cert: str, key: str) -> str | None:
    """Why gRPC could not use the PEM certificate chain ``cert`` with the private key
    ``key``, if it could not (gRPC itself would only fail to bind)."""
    import ssl

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        ctx.load_verify_locations(cafile=cert)
    except ssl.SSLError:
        return f"--tls-cert {cert}: cannot read it as a PEM certificate"
    except OSError as err:
        return f"--tls-cert {cert}: {err.strerror or err}"
    try:
        ctx.load_cert_chain(cert, key, password=lambda: b"")
    except ssl.SSLError:
        return (
            f"--tls-key {key}: cannot read it as an unencrypted PEM private key of the "
            "--tls-cert certificate"
        )
    except OSError as err:
        return f"--tls-key {key}: {err.strerror or err}"
    return None


def run(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    if bool(args.tls_cert) != bool(args.tls_key):
        parser.error("serve: --tls-cert and --tls-key go together")
    if args.tls_cert and (problem := _tls_problem(args.tls_cert, args.tls_key)):
        return _error(problem)
    if args.ray and not args.shards:
        parser.error("serve: --ray goes with --shards")
    if args.shards is not None and args.shards < 1:
        parser.error(f"serve: --shards must be at least 1, not {args.shards}")
    from psoup.server import ServerConfig, check_placement, serve_forever
    from psoup.storage.durable import default_data_dir
    from psoup.storage.log import LogCorruptError

    config = ServerConfig(
        host=args.host,
        port=args.port,
        strategy=args.strategy,
        auth_tokens_file=args.auth_tokens,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        insecure=args.insecure,
        max_message_bytes=args.max_message_bytes,
        max_batch_rows=args.max_batch_rows,
        max_query_chars=args.max_query_chars,
        max_queries_per_client=args.max_queries_per_client,
        max_templates=args.max_templates,
        max_batch_items=args.max_batch_items,
        max_invoke_calls=args.max_invoke_calls,
        invoke_idle_seconds=args.invoke_idle_seconds or None,
        ingest_queue_batches=args.ingest_queue_batches,
        ingest_turns=args.ingest_turns,
        ingest_share=args.ingest_share,
        max_staged_bytes=args.max_staged_bytes,
        freeze_heap_every=args.freeze_heap_every,
        app=args.app or (f"linear-road={args.linear_road}" if args.linear_road else None),
        data_dir=None if args.in_memory else str(args.data_dir or default_data_dir()),
        sync=args.sync,
        checkpoint_bytes=args.checkpoint_every << 20,
        shards=args.shards,
        ray_address=args.ray,
        metrics_port=args.metrics_port,
        flight_port=args.flight_port,
        log_level=args.log_level,
        log_format=args.log_format,
        cpus=args.cpus,
        shard_cpus=args.shard_cpus,
    )
    try:
        check_placement(config)
    except ValueError as err:
        parser.error(f"serve: {err}")
    # Recovery's warnings (a torn last record dropped) as one plain line each.
    warnings.formatwarning = lambda message, *_args, **_kw: f"psoup: warning: {message}\n"
    try:
        return serve_forever(config)
    except (ValueError, RuntimeError, OSError, LogCorruptError) as err:
        # a bad token file or TLS file, a busy port or data directory, a damaged log
        return _error(str(err))
