"""``psoup history hydrate`` and ``psoup history export``, run on parsed arguments.

``psoup/cli/history.py`` parses; ``run`` calls the job, prints its summary on stdout and
turns a failure into ``error: ...`` on stderr and the exit status of the client commands:
1 the server refused or the input is bad (missing file, no valid row, schema mismatch, a
failed Spark job), 3 the server cannot be reached.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path

from clients import PSoupRpcError, Unavailable
from psoup.cli_client import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_UNREACHABLE
from psoup.history import HistoryError


def _certificates(args: argparse.Namespace) -> bytes | None:
    # Read on the driver and shipped to the tasks, which may run elsewhere.
    return Path(args.tls_ca).read_bytes() if args.tls_ca else None


def _hydrate(args: argparse.Namespace) -> str:
    from psoup.history.hydrate import hydrate

    summary = hydrate(
        args.tolls,
        server=args.server,
        stream=args.stream,
        token=args.token,
        master=args.master,
        conf=dict(args.conf),
        rejects=args.rejects,
        batch_rows=args.batch_rows,
        timeout=args.timeout,
        root_certificates=_certificates(args),
        progress=not args.no_progress,
    )
    return summary.text()


def _export(args: argparse.Namespace) -> str:
    from psoup.history.export import export

    summary = export(
        args.stream,
        args.out,
        server=args.server,
        token=args.token,
        master=args.master,
        conf=dict(args.conf),
        parts=args.parts,
        timeout=args.timeout,
        root_certificates=_certificates(args),
        progress=not args.no_progress,
    )
    return summary.text()


def _cluster(args: argparse.Namespace) -> int:
    """Run a local standalone cluster until interrupted; 130 then, as after any Ctrl-C."""
    from psoup.history.cluster import LocalCluster

    cluster = LocalCluster(args.workers, args.cores, args.memory)

    def terminated(signum, frame) -> None:
        raise KeyboardInterrupt  # SIGTERM stops the cluster as Ctrl-C does

    signal.signal(signal.SIGTERM, terminated)
    try:
        print(f"starting a Spark master and {args.workers} workers ...", file=sys.stderr)
        cluster.start()
        print(f"spark master {cluster.url}  (web UI {cluster.web_url}; logs in "
              f"{cluster.directory}); Ctrl-C stops it", flush=True)  # fmt: skip
        while all(p.poll() is None for p in cluster.procs):
            time.sleep(1)
        print("error: a Spark daemon exited; see the logs", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print("stopped", file=sys.stderr)
        return EXIT_INTERRUPTED
    except HistoryError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_FAILED
    finally:
        cluster.stop()


def run(args: argparse.Namespace) -> int:
    """Run ``args.history_command`` (hydrate, export or cluster); returns the exit status."""
    if args.history_command == "cluster":
        return _cluster(args)
    job = _hydrate if args.history_command == "hydrate" else _export
    try:
        text = job(args)
    except PSoupRpcError as err:
        print(f"error: {err.code.name}: {err.message}", file=sys.stderr)
        return EXIT_UNREACHABLE if isinstance(err, Unavailable) else EXIT_FAILED
    except (HistoryError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_FAILED
    except Exception as err:  # a failed Spark job
        from psoup.history.spark import failure, log_path

        print(f"error: the Spark job failed: {failure(err)} (Spark's log: {log_path()})",
              file=sys.stderr)  # fmt: skip
        return EXIT_FAILED
    print(text, flush=True)
    return EXIT_OK
