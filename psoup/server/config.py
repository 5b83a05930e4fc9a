"""The server's settings: address, strategy, security and the limits it enforces."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class ServerConfig:
    """Everything ``psoup serve`` can be told. Limits are enforced with RESOURCE_EXHAUSTED."""

    host: str = "127.0.0.1"
    port: int = 50051  # 0 picks a free port
    strategy: str = "psoup-p"
    auth_tokens_file: str | None = None  # lines "client-id:token"; None = no authentication
    tls_cert: str | None = None
    tls_key: str | None = None
    insecure: bool = False  # allow tokens without TLS on an address that is not loopback
    max_message_bytes: int = 64 << 20
    max_batch_rows: int = 1_000_000
    max_query_chars: int = 10_000
    max_queries_per_client: int = 100_000
    max_templates: int = 10_000  # prepared templates (PrepareQuery), all clients together
    max_batch_items: int = 1_024  # registrations and invokes in one Batch call
    # Invokes calls open at once: each holds one of ``workers`` handler threads while open.
    max_invoke_calls: int = 8
    # At that limit, a new Invokes call takes the place of the one idle longest if it
    # has waited this long for a request (psoup/server/invoke_calls.py); None: never.
    invoke_idle_seconds: float | None = 10.0
    max_staged_bytes: int = 8 << 30  # rows staged by all open bulk loads together
    ingest_queue_batches: int = 64  # batches waiting for the engine before Ingest is refused
    ingest_turns: int = 1  # Ingest batches on their way to the engine at once (server/turns.py)
    ingest_share: float = 0.5  # of the time ingest may hold its turns while interactive calls come
    subscription_buffer: int = 10_000  # undelivered messages before a subscriber is cut off
    page_rows: int = 4096  # default rows per InvokeQuery page
    workers: int = 32  # gRPC handler threads
    metrics_port: int | None = None  # serve Prometheus metrics here over HTTP (0: free port)
    # Take ingest as Arrow Flight DoPut here too (psoup/server/flight.py; 0: free port).
    flight_port: int | None = None
    log_level: str = "info"  # psoup serve's log on stderr (psoup/server/logs.py)
    log_format: str = "text"  # text | json
    freeze_heap_every: float = 1.0  # seconds between heap freezes (psoup/heap.py); 0 = never
    # An application to run inside the server, NAME or NAME=ARG (psoup/server/apps.py),
    # e.g. "linear-road=validator"; None: none.
    app: str | None = None
    # Keep everything in this data directory and recover from it on start (None: in
    # memory only; ``psoup serve`` picks a default directory unless --in-memory).
    data_dir: str | None = None
    sync: str = "batch"  # batch | interval=MS | off (psoup/storage/log.py: Sync)
    # Engine shards on Ray (psoup/shard; docs/SCALE_OUT.md): None = one engine here.
    shards: int | None = None
    ray_address: str | None = None  # join this Ray cluster (None: start one for this server)
    checkpoint_bytes: int = 256 << 20  # log written since the last checkpoint that starts one
    # Keep every thread of the server on these CPUs (psoup/pinning.py); None: the
    # scheduler places them.
    cpus: frozenset[int] | None = None
    # Keep each engine shard's process on these CPUs of its node (with ``shards``; the
    # pinning module); None: the scheduler places it.
    shard_cpus: frozenset[int] | None = None
