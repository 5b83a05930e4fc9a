"""Starting and stopping the server: gRPC wiring, health, reflection, TLS, signals."""

from __future__ import annotations

import functools
import ipaddress
import logging
import signal
import socket
import threading
from concurrent import futures
from pathlib import Path
from typing import TYPE_CHECKING

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

import psoup
from psoup.api import psoup_pb2 as pb
from psoup.api import psoup_pb2_grpc as pb_grpc
from psoup.pinning import check_cpus, threads_made_on
from psoup.server import logs
from psoup.server.apps import AppSpec
from psoup.server.auth import Authenticator, load_tokens
from psoup.server.config import ServerConfig
from psoup.server.guard import DecodeGuard
from psoup.server.logs import event
from psoup.server.observe import Observer
from psoup.server.servicer import PSoupServicer
from psoup.server.worker import EngineWorker
from psoup.storage.durable import CheckpointStats, DataDir
from psoup.storage.log import Sync

if TYPE_CHECKING:
    from psoup.server.flight import FlightIngest

log = logging.getLogger("psoup.server")
SERVICE = pb.DESCRIPTOR.services_by_name["PSoup"].full_name


class RunningServer:
    """A started server: its bound ``port``, ``stop()`` and ``wait_for_termination()``."""

    def __init__(
        self, server: grpc.Server, port: int, worker: EngineWorker, health_servicer, servicer
    ):
        self.server = server
        self.port = port
        self.worker = worker
        self.health = health_servicer
        self.servicer = servicer
        self.engine = servicer.engine
        self.observer = servicer.observer
        self.metrics_port: int | None = None  # where the metrics are served, if anywhere
        self.flight: FlightIngest | None = None  # Arrow Flight ingest, if asked for
        self.flight_port: int | None = None
        self._stopped = threading.Event()

    def stop(self, grace: float | None = 5.0) -> None:
        """Refuse new calls, let in-flight ones finish for ``grace`` seconds, then stop."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        self.health.enter_graceful_shutdown()
        if self.flight is not None:
            self.flight.stop(grace)
        self.server.stop(grace).wait()
        self.observer.stop()
        self.worker.stop()
        if self.engine.storage is not None:
            self.engine.storage.close()
        if getattr(self.engine, "channels", None) is not None:  # a sharded engine
            self.engine.close()  # ends the shards

    def wait_for_termination(self, timeout: float | None = None) -> bool:
        return self.server.wait_for_termination(timeout)


def _checkpointed(observer: Observer, stats: CheckpointStats) -> None:
    """A checkpoint is complete: its metrics and an info event."""
    observer.checkpoint_seconds.observe(stats.seconds)
    observer.checkpoint_hold_seconds.observe(stats.capture_seconds)
    event(log, logging.INFO, "checkpoint", stats.describe(), lsn=stats.lsn,
          hold_seconds=round(stats.capture_seconds, 4),
          write_seconds=round(stats.write_seconds, 3),
          remove_seconds=round(stats.remove_seconds, 3),
          bytes_written=stats.bytes_written, bytes_linked=stats.bytes_linked,
          parts={k: round(v, 3) for k, v in stats.parts.items()},
          held={k: round(v, 4) for k, v in stats.held.items()})  # fmt: skip


def _check_port_free(host: str, port: int) -> None:
    """RuntimeError naming the address when another process listens on it (gRPC would
    say so only in a C-core log line, or share the port under SO_REUSEPORT)."""
    if port == 0:
        return
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError:
        return  # gRPC reports an unresolvable host itself
    family, kind, proto, _, addr = infos[0]
    with socket.socket(family, kind, proto) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT is no owner
        try:
            s.bind(addr)
        except OSError as err:
            raise RuntimeError(
                f"cannot bind {host}:{port}: {err.strerror} (is another server using it?)"
            ) from None


def _address(host: str, port: int) -> str:
    """``host:port``, an IPv6 host in brackets (``[::1]:50051``)."""
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"


def _is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine's loopback interface only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _engine(config: ServerConfig):
    """One engine in this process, or (``--shards``) the front-end over shard actors on
    Ray (imported only then)."""
    if config.shards is None:
        return psoup.connect(strategy=config.strategy)
    from psoup.shard.cluster import start_shards
    from psoup.shard.front import ShardedEngine

    channels = start_shards(
        config.shards, config.data_dir, config.sync, config.strategy, config.ray_address,
        cpus=config.shard_cpus, checkpoint_bytes=config.checkpoint_bytes,
    )  # fmt: skip
    return ShardedEngine(channels, strategy=config.strategy)


def start_server(config: ServerConfig) -> RunningServer:
    """Build the engine, bind ``config.host:config.port`` (0 = any free port) and start.
    With ``config.cpus``, every thread (and process) the server makes runs on those CPUs,
    and with ``config.shard_cpus`` its shards' processes on theirs (psoup/pinning.py).

    Raises ValueError for a bad token file, TLS setting or CPU list, RuntimeError if the
    port cannot be bound.
    """
    with threads_made_on(check_placement(config)):
        return _start_server(config)


def check_placement(config: ServerConfig) -> frozenset[int] | None:
    """``config.cpus`` checked, and ``config.shard_cpus`` with it (only with shards;
    against this machine's CPUs when the shards run here, a cluster's shards check
    theirs on their own nodes): the server's CPUs (None: not placed). Raises ValueError
    naming the option."""
    if config.shard_cpus is not None:
        if config.shards is None:
            raise ValueError("--shard-cpus goes with --shards")
        if config.ray_address is None:
            check_cpus(config.shard_cpus, "--shard-cpus")
    return check_cpus(config.cpus)


def _start_server(config: ServerConfig) -> RunningServer:
    tokens, admins = (
        load_tokens(config.auth_tokens_file) if config.auth_tokens_file else (None, frozenset())
    )
    cleartext = tokens is not None and not config.tls_cert and not config.insecure
    if cleartext and not _is_loopback(config.host):
        raise ValueError(
            f"--auth-tokens without TLS on {config.host}, which is not a loopback "
            "address, would send the tokens in clear: give --tls-cert and --tls-key, "
            "or --insecure if the network is trusted"
        )
    sync = Sync.parse(config.sync)
    _check_port_free(config.host, config.port)
    # Taken first: a second server on the same directory stops here, before the port.
    app = AppSpec.parse(config.app) if config.app else None
    if app is not None:
        app.load()  # an unknown application is refused before anything is opened
    if config.shards is not None and not 1 <= config.shards <= 256:
        raise ValueError(f"--shards: {config.shards} is not between 1 and 256")
    kind = app.key if app else None
    if config.shards is not None:
        kind = f"{kind}+sharded({config.shards})" if kind else f"sharded({config.shards})"
    data = (
        DataDir(config.data_dir, sync, application=kind, checkpoint_bytes=config.checkpoint_bytes)
        if config.data_dir
        else None
    )  # fmt: skip
    try:
        engine = _engine(config)
    except BaseException:
        if data is not None:
            data.close()
        raise
    worker = EngineWorker(config.ingest_queue_batches, config.freeze_heap_every)
    try:
        if app is not None:
            # The application first, so that replaying the log drives its triggers.
            worker.call(lambda: app.install(engine))
        if data is not None:
            rec = worker.call(lambda: data.recover(engine))
            since = (
                f"the checkpoint at record {rec.checkpoint_lsn} and " if rec.checkpoint_lsn else ""
            )
            event(log, logging.INFO, "recovered",
                  f"data directory {data.path} (sync {sync}): recovered {since}"
                  f"{rec.records:,} log records in {rec.seconds:.1f} s",
                  data_dir=str(data.path), sync=str(sync), checkpoint_lsn=rec.checkpoint_lsn,
                  records=rec.records, seconds=round(rec.seconds, 3))  # fmt: skip
    except BaseException:
        worker.stop()
        if data is not None:
            data.close()
        raise
    auth = Authenticator(tokens, admins)
    observer = Observer(engine.strategy.name, auth.who)
    if data is not None:
        data.log.on_flush = observer.flush_seconds.observe
        data.on_checkpoint = functools.partial(_checkpointed, observer)
    servicer = PSoupServicer(engine, worker, auth, config, observer)
    observer.watch_engine(lambda: worker.submit(servicer.snapshot).result(timeout=10))
    options = [
        ("grpc.max_receive_message_length", config.max_message_bytes),
        ("grpc.max_send_message_length", config.max_message_bytes),
        ("grpc.so_reuseport", 0),  # a busy port is an error, not a shared one
    ]
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=config.workers),
        options=options,
        interceptors=[observer.interceptor(), DecodeGuard()],
    )
    pb_grpc.add_PSoupServicer_to_server(servicer, server)
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        (
            SERVICE,
            health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
            reflection.SERVICE_NAME,
        ),
        server,
    )
    address = _address(config.host, config.port)
    if config.tls_cert or config.tls_key:
        if not (config.tls_cert and config.tls_key):
            raise ValueError("TLS needs both --tls-cert and --tls-key")
        creds = grpc.ssl_server_credentials(
            [(Path(config.tls_key).read_bytes(), Path(config.tls_cert).read_bytes())]
        )
        port = server.add_secure_port(address, creds)
    else:
        port = server.add_insecure_port(address)
    if not port:
        worker.stop()
        if data is not None:
            data.close()
        raise RuntimeError(f"cannot bind {address} (is another server using it?)")
    running = RunningServer(server, port, worker, health_servicer, servicer)
    if config.metrics_port is not None:
        try:
            running.metrics_port = observer.serve(config.host, config.metrics_port)
        except OSError as err:
            running.stop(grace=0)
            raise RuntimeError(
                f"cannot serve metrics on {_address(config.host, config.metrics_port)}: "
                f"{err.strerror}"
            ) from None
    if config.flight_port is not None:
        try:
            running.flight = _flight(config, servicer)
        except BaseException:
            running.stop(grace=0)
            raise
        running.flight_port = running.flight.port
    server.start()
    for name in ("", SERVICE):
        health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    return running


def _flight(config: ServerConfig, servicer: PSoupServicer) -> FlightIngest:
    """The Arrow Flight ingest server on ``config.host:config.flight_port``, with the
    gRPC service's TLS key and certificate. RuntimeError naming the address when the
    port is taken. (Imported here: pyarrow's Flight only for a server that asks.)"""
    import pyarrow as pa

    from psoup.server.flight import FlightIngest

    _check_port_free(config.host, config.flight_port)
    tls = None
    if config.tls_cert:
        tls = (Path(config.tls_cert).read_bytes(), Path(config.tls_key).read_bytes())
    scheme = "grpc+tls" if tls else "grpc+tcp"
    where = _address(config.host, config.flight_port)
    try:
        return FlightIngest(f"{scheme}://{where}", servicer, tls)
    except (OSError, pa.ArrowException) as err:
        raise RuntimeError(f"cannot serve Arrow Flight on {where}: {err}") from None


def serve_forever(config: ServerConfig) -> int:
    """Run until SIGTERM or Ctrl-C, then drain in-flight calls and stop. Returns 0.

    Prints ``psoup serving on HOST:PORT`` (the bound port) once ready.
    """
    logs.configure(config.log_level, config.log_format)
    running = start_server(config)
    done = threading.Event()

    def on_signal(signum, frame):
        done.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    print(f"psoup serving on {_address(config.host, running.port)}", flush=True)
    if running.flight_port is not None:
        print(f"psoup flight ingest on {_address(config.host, running.flight_port)}", flush=True)
    if running.metrics_port is not None:
        event(log, logging.INFO, "metrics",
              f"metrics on http://{_address(config.host, running.metrics_port)}/metrics",
              port=running.metrics_port)  # fmt: skip
    done.wait()
    event(log, logging.INFO, "stopping", "draining and stopping")
    running.stop(grace=5.0)
    return 0
