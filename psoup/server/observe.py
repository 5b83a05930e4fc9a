"""Watching a running server: Prometheus metrics and one log line per refused request.

``Observer`` owns a prometheus-client registry (its own, so several servers in one
process do not mix) with:

* counted as they happen: requests per client and method, refusals per client, method
  and status code (PERMISSION_DENIED and UNAUTHENTICATED are the denials), tuples
  ingested and rejected and batches per stream, the invoke latency histogram (labelled
  with the engine's strategy), log flush and checkpoint durations;
* read from the engine at each scrape (on the engine thread, between two batches): the
  ingest queue depth, subscriptions, standing queries, tuples and bytes stored per
  stream, matches marked;
* the process's own figures (resident memory, CPU, open files) from prometheus-client's
  process collector.

``psoup serve --metrics-port N`` serves them over HTTP in Prometheus' text format.
Requests are seen by a gRPC server interceptor, which also logs every refused request
once (client id, method, status, reason; never the token) to the ``psoup.server``
logger. Recording costs O(1) per request; a scrape O(streams).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import NamedTuple

import grpc
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    ProcessCollector,
    start_http_server,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from psoup.server.logs import event

log = logging.getLogger("psoup.server")

LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                   0.25, 0.5, 1.0, 2.5)  # fmt: skip
DURATION_BUCKETS = (0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0, 120.0)
DENIALS = (grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED)


class _EngineCollector(Collector):
    """Gauges read from the engine at scrape time through ``snapshot()``."""

    def __init__(self, snapshot: Callable[[], dict]):
        self.snapshot = snapshot

    def collect(self):
        try:
            s = self.snapshot()
        except Exception:  # the engine is stopping: no engine figures in this scrape
            return
        yield GaugeMetricFamily(
            "psoup_ingest_queue_batches", "Ingest batches waiting for the engine",
            value=s["queue_depth"],
        )  # fmt: skip
        yield GaugeMetricFamily(
            "psoup_subscriptions", "Open subscriptions", value=s["subscriptions"]
        )
        yield GaugeMetricFamily("psoup_invoke_calls", "Open Invokes calls", value=s["invoke_calls"])
        yield CounterMetricFamily(
            "psoup_invoke_calls_taken_over",
            "Idle Invokes calls cancelled to make room for a new one (--invoke-idle-seconds)",
            value=s["invoke_calls_taken_over"],
        )
        yield GaugeMetricFamily(
            "psoup_standing_queries_total", "Registered standing queries", value=s["queries"]
        )
        yield CounterMetricFamily(
            "psoup_matches_marked", "Matches marked in the results structure",
            value=s["matches_marked"],
        )  # fmt: skip
        yield CounterMetricFamily(
            "psoup_ingest_paused_seconds",
            "Time ingest waited for interactive calls (psoup serve --ingest-share)",
            value=s["ingest_paused_seconds"],
        )
        per = {
            "psoup_standing_queries": ("Standing queries reading the stream", "queries"),
            "psoup_tuples_stored": ("Tuples retained in the stream", "tuples_stored"),
            "psoup_stream_bytes": ("Bytes the stream's stored tuples take", "bytes"),
        }
        for name, (doc, key) in per.items():
            g = GaugeMetricFamily(name, doc, labels=["stream"])
            for stream, st in sorted(s["streams"].items()):
                g.add_metric([stream], st[key])
            yield g
        if not s.get("shards"):
            return
        shard = {
            "psoup_shard_up": ("1 when the shard answers, 0 while it recovers", None),
            "psoup_shard_tuples_stored": ("Tuples the shard retains", "tuples"),
            "psoup_shard_standing_queries": ("Standing queries on the shard", "queries"),
            "psoup_shard_memory_bytes": ("Resident memory of the shard's process", "rss_bytes"),
            "psoup_shard_restarts": ("Times the shard was found restarted", "restarts"),
        }
        for name, (doc, key) in shard.items():
            g = GaugeMetricFamily(name, doc, labels=["shard"])
            for row in s["shards"]:
                value = float(row["state"] == "up") if key is None else row.get(key, 0)
                g.add_metric([str(row["index"])], value)
            yield g


class Observer:
    """The server's metrics registry and its request interceptor."""

    def __init__(self, strategy: str, who: Callable[[object], str]):
        self.strategy = strategy
        self.who = who  # invocation metadata -> client id, never raising
        r = self.registry = CollectorRegistry()
        self.requests = Counter(
            "psoup_requests", "Requests by client and method", ["client", "method"], registry=r
        )
        self.refused = Counter(
            "psoup_refused", "Requests answered with an error, by client, method and status",
            ["client", "method", "code"], registry=r,
        )  # fmt: skip
        self.denials = Counter(
            "psoup_denials", "Requests refused as unauthenticated or not permitted, by client",
            ["client"], registry=r,
        )  # fmt: skip
        self.ingested = Counter(
            "psoup_tuples_ingested", "Tuples accepted, by stream", ["stream"], registry=r
        )
        self.rejected = Counter(
            "psoup_tuples_rejected", "Tuples of refused batches, by stream", ["stream"],
            registry=r,
        )  # fmt: skip
        self.batches = Counter(
            "psoup_batches", "Ingest batches accepted, by stream", ["stream"], registry=r
        )
        self.invoke_seconds = Histogram(
            "psoup_invoke_seconds", "Invoke latency in the server, by strategy", ["strategy"],
            buckets=LATENCY_BUCKETS, registry=r,
        )  # fmt: skip
        self.flush_seconds = Histogram(
            "psoup_log_flush_seconds", "Time to force the log to disk",
            buckets=DURATION_BUCKETS, registry=r,
        )  # fmt: skip
        self.checkpoint_seconds = Histogram(
            "psoup_checkpoint_seconds", "Time to write a checkpoint",
            buckets=DURATION_BUCKETS, registry=r,
        )  # fmt: skip
        self.checkpoint_hold_seconds = Histogram(
            "psoup_checkpoint_hold_seconds",
            "Time a checkpoint held the engine (its image taken under the engine lock)",
            buckets=DURATION_BUCKETS, registry=r,
        )  # fmt: skip
        self._invoke_seconds = self.invoke_seconds.labels(strategy)  # looked up once
        ProcessCollector(registry=r)
        self._http = None
        self._arrived: list[Callable[[str], None]] = []
        self._counters: dict[tuple[str, str], object] = {}  # (client, method) -> counter

    def on_request(self, hook: Callable[[str], None]) -> None:
        """Call ``hook(method)`` as each request arrives, before it runs."""
        self._arrived.append(hook)

    def watch_engine(self, snapshot: Callable[[], dict]) -> None:
        """Read the engine's gauges through ``snapshot()`` at each scrape."""
        self.registry.register(_EngineCollector(snapshot))

    def serve(self, host: str, port: int) -> int:
        """Serve the metrics over HTTP on ``host:port`` (0: a free port); returns the
        port."""
        self._http, _thread = start_http_server(port, addr=host, registry=self.registry)
        return self._http.server_port

    def stop(self) -> None:
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None

    def invoked(self, seconds: float) -> None:
        self._invoke_seconds.observe(seconds)

    def interceptor(self) -> grpc.ServerInterceptor:
        return _Interceptor(self)

    def counted(self, client: str, method: str) -> None:
        """Count a request of ``client`` for ``method`` (a gRPC method's name, or
        ``DoPut`` for Arrow Flight ingest, psoup/server/flight.py). O(1): a pair's
        counter is looked up once; bounded, as the clients are the server's tokens' ids
        (or the two without one)."""
        if (c := self._counters.get((client, method))) is None:
            c = self._counters[(client, method)] = self.requests.labels(client, method)
        c.inc()

    def ended(
        self,
        client: str,
        method: str,
        code: grpc.StatusCode | None,
        reason: str | bytes | None,
        start: float,
    ) -> None:
        """Record how a request that began at ``start`` (``time.perf_counter()``) ended:
        a refusal (any ``code`` but None and OK) is counted by client, method and code,
        as a denial too for PERMISSION_DENIED and UNAUTHENTICATED, and logged once. O(1)."""
        if code is None or code == grpc.StatusCode.OK:
            return
        self.refused.labels(client, method, code.name).inc()
        if code in DENIALS:
            self.denials.labels(client).inc()
        reason = reason or ""
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        event(log, logging.INFO, "refused", f"refused {method} from {client}: {code.name}: "
              f"{reason}", client=client, method=method, code=code.name, reason=reason,
              ms=round(1e3 * (time.perf_counter() - start), 3))  # fmt: skip


class _Interceptor(grpc.ServerInterceptor):
    """Counts each request by client and method and its outcome; logs refusals. A
    method's handler is wrapped once, at its first call, and reused; a (client, method)
    pair's counter is looked up once: O(1) per call, a few dictionary lookups."""

    def __init__(self, observer: Observer):
        self.o = observer
        self._wrapped: dict[str, _Wrapped] = {}  # method path -> its wrapped handler

    def intercept_service(self, continuation, details):
        if (wrapped := self._wrapped.get(details.method)) is None:
            handler = continuation(details)
            if handler is None:  # not a method of the service: nothing kept
                return None
            wrapped = self._wrapped[details.method] = self._counted(handler, details.method)
        for hook in self.o._arrived:
            hook(wrapped.method)
        return wrapped.handler

    def _counted(self, handler: grpc.RpcMethodHandler, path: str) -> _Wrapped:
        o, count = self.o, self.o.counted
        method = path.rsplit("/", 1)[-1]

        def unary(behavior):
            def run(request, context):
                start = time.perf_counter()
                client = o.who(context.invocation_metadata())
                count(client, method)
                try:
                    return behavior(request, context)
                finally:
                    o.ended(client, method, context.code(), context.details(), start)

            return run

        def streaming(behavior):
            def run(request, context):
                start = time.perf_counter()
                client = o.who(context.invocation_metadata())
                count(client, method)
                try:
                    yield from behavior(request, context)
                finally:
                    o.ended(client, method, context.code(), context.details(), start)

            return run

        if handler.unary_unary:
            wrapped = handler._replace(unary_unary=unary(handler.unary_unary))
        elif handler.stream_unary:
            wrapped = handler._replace(stream_unary=unary(handler.stream_unary))
        elif handler.unary_stream:
            wrapped = handler._replace(unary_stream=streaming(handler.unary_stream))
        else:
            wrapped = handler._replace(stream_stream=streaming(handler.stream_stream))
        return _Wrapped(method, wrapped)


class _Wrapped(NamedTuple):
    method: str  # the method's name, without its service
    handler: grpc.RpcMethodHandler
