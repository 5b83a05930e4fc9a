"""Engine shards as Ray actors (``psoup serve --shards N [--ray ADDRESS]``).

Without an address a Ray instance is started for this process: no dashboard, its logs
and sockets under the data directory's ``ray/`` (when the path is short enough for a
Unix socket), nothing of it on the terminal. With an address the server joins that
cluster (``ray start --head`` on one machine, ``ray start --address`` on the others).

Shard K is the actor ``psoup-shard-K`` in a namespace of the data directory's own, so
two servers on one Ray cluster never share shards, and a server restarted after a crash
finds its shards still running when the cluster outlived it. With a data directory the
actors are detached (they outlive the process that made them) and Ray restarts a dead
one without limit (``max_restarts=-1``); its constructor recovers the shard from
``DIR/shards/shard-K``. Calls are never retried by Ray (``max_task_retries=0``): the
channel resends, in order, under the new incarnation's epoch (psoup/shard/channel.py).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import secrets
import threading
from collections.abc import Callable
from pathlib import Path

from psoup.pinning import pin_process
from psoup.shard import wire
from psoup.shard.channel import Channel, Lost
from psoup.shard.shard import Shard, StaleEpoch


class RayShard(Shard):
    """A shard as a Ray actor: its socket listens on its node's address. It runs at
    normal priority where it may (a cluster not started by psoup starts its workers at
    nice 15 unless ``RAY_worker_niceness=0`` is set for ``ray start``), and with ``cpus``
    its whole process stays on those CPUs of its node (``psoup serve --shard-cpus``;
    ValueError if it cannot)."""

    def __init__(self, *args, cpus: frozenset[int] | None = None, **kwargs):
        with contextlib.suppress(OSError):  # lowering niceness may need privileges
            os.setpriority(os.PRIO_PROCESS, 0, 0)
        if cpus:
            pin_process(cpus, "--shard-cpus")
        # Its events (each checkpoint) go to the worker's stderr: Ray's worker-*.err log.
        shard_log = logging.getLogger("psoup.shard")
        if not shard_log.handlers:
            handler = logging.StreamHandler()
            handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
            shard_log.addHandler(handler)
            shard_log.setLevel(logging.INFO)
        super().__init__(*args, **kwargs)

    def address(self) -> tuple[tuple[str, int], bytes]:
        import ray

        return self.listen(ray.util.get_node_ip_address())


class RayTransport:
    """One shard actor: Ray places, restarts and introduces it (``hello``, ``status``,
    ``close`` are Ray calls); the operations go over the socket it serves
    (``Shard.listen``), in order, answers read back in order. A closed connection, or
    one silent while Ray says the shard has a new epoch or is gone, is ``Lost``.
    ``on_close``: called once the actor is ended (``start_shards``'s count of the shards
    on the Ray it connected to)."""

    POLL = 5.0  # seconds of silence before Ray is asked whether the shard is alive

    def __init__(self, actor, on_close: Callable[[], None] | None = None):
        self.actor = actor
        self.conn = None
        self.epoch = ""
        self._on_close = on_close

    def hello(self, timeout: float):
        from multiprocessing.connection import Client

        import ray

        hello = ray.get(self.actor.hello.remote(), timeout=timeout)
        address, key = ray.get(self.actor.address.remote(), timeout=timeout)
        if self.conn is not None:
            with contextlib.suppress(OSError):
                self.conn.close()
        self.conn = wire.attach(Client(tuple(address), authkey=key))
        self.epoch = hello[0]
        return hello

    def send(self, epoch: str, ops: list[tuple]):
        wire.send(self.conn, (epoch, ops))
        return self.conn

    def result(self, conn, timeout: float | None):
        import ray

        try:
            while not wire.ready(conn, self.POLL):
                try:
                    now = ray.get(self.actor.hello.remote(), timeout=self.POLL)[0]
                except Exception as err:  # Ray cannot reach it either
                    raise Lost(f"shard silent and not answering Ray: {err}") from None
                if now != self.epoch:
                    raise Lost("the shard was restarted meanwhile")
            kind, value = wire.recv(conn)
        except (EOFError, OSError) as err:
            raise Lost(f"{type(err).__name__}: {err}") from None
        if kind == "stale":
            raise StaleEpoch(value)
        return value

    def status(self, timeout: float) -> dict:
        import ray

        return ray.get(self.actor.status.remote(), timeout=timeout)

    def close(self) -> None:
        """Close the shard's data directory (a checkpoint) and end the actor."""
        import ray

        if self.conn is not None:
            with contextlib.suppress(OSError):
                self.conn.close()
        try:
            with contextlib.suppress(Exception):  # already gone: nothing to close
                ray.get(self.actor.close.remote(), timeout=60)
            ray.kill(self.actor, no_restart=True)
        finally:
            done, self._on_close = self._on_close, None
            if done is not None:
                done()


def shard_dir(data_dir: str | Path, k: int) -> Path:
    """Where shard ``k`` of the server on ``data_dir`` keeps its data."""
    return Path(data_dir).resolve() / "shards" / f"shard-{k}"


def namespace_for(data_dir: str | None) -> str:
    """The Ray namespace of a server's shards: one per data directory (in memory: one
    per process)."""
    if data_dir is None:
        return f"psoup-mem-{os.getpid()}-{secrets.token_hex(4)}"
    digest = hashlib.sha1(str(Path(data_dir).resolve()).encode()).hexdigest()[:12]
    return f"psoup-{digest}"


#: Shards ``start_shards`` made on a Ray connection of this process's own (``init_ray``
#: made it) and not yet closed: the last one's close ends the connection, and with it
#: the Ray instance it started, so an embedded server's ``stop`` leaves no Ray behind.
#: A connection the caller made (``ray.init`` before) is the caller's to end.
_ours = {"connected": False, "shards": 0}
_ours_lock = threading.Lock()


def init_ray(address: str | None, data_dir: str | None, namespace: str) -> None:
    """Join the Ray cluster at ``address``, or start one for this process."""
    import ray

    if ray.is_initialized():
        return
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # so `ray start` nodes can join
    # Ray starts its workers at nice 15 by default: a shard, the engine's workhorse, would
    # then yield its core to the front-end and the clients whenever they compete.
    os.environ.setdefault("RAY_worker_niceness", "0")
    kwargs = dict(namespace=namespace, log_to_driver=False, configure_logging=False)
    if address is None:
        kwargs["include_dashboard"] = False
        if data_dir is not None:
            tmp = Path(data_dir).resolve() / "ray"
            if len(str(tmp)) < 60:  # Ray's Unix socket paths must stay under ~107 bytes
                tmp.mkdir(parents=True, exist_ok=True)
                kwargs["_temp_dir"] = str(tmp)
    # Ray waits 30 s for its GCS server to publish its port; on a loaded 2-core machine
    # (a test suite beside it) the start has taken longer, so give it more, and start
    # once more if it still did not come up.
    # (Only when starting one: the same variable sets how long joining a cluster retries.)
    if address is None:
        os.environ.setdefault("RAY_gcs_server_port_wait_time_s", "120")
    try:
        ray.init(address=address, **kwargs)
    except RuntimeError as exc:
        if address is not None or "Timed out waiting for file" not in str(exc):
            raise
        ray.shutdown()
        ray.init(address=address, **kwargs)
    with _ours_lock:
        _ours["connected"] = True


def _shard_closed() -> None:
    """One of ``start_shards``'s shards was closed: end this process's own Ray
    connection after its last."""
    import ray

    with _ours_lock:
        _ours["shards"] -= 1
        if _ours["shards"] or not _ours["connected"]:
            return
        _ours["connected"] = False
    ray.shutdown()


def start_shards(
    n: int,
    data_dir: str | None,
    sync: str = "batch",
    strategy: str = "psoup-p",
    address: str | None = None,
    placement: list[dict] | None = None,
    cpus: frozenset[int] | None = None,
    **engine_options,
) -> list[Channel]:
    """Channels to ``n`` shard actors, started (or found running) on Ray.
    ``placement``: extra actor options per shard (e.g. ``resources`` to pin it to
    nodes); ``cpus``: the CPUs each shard's process is kept on, on its node (None: the
    scheduler places it)."""
    import ray

    namespace = namespace_for(data_dir)
    init_ray(address, data_dir, namespace)
    actor_class = ray.remote(RayShard)
    channels = []
    for k in range(n):
        where = None if data_dir is None else str(shard_dir(data_dir, k))
        opts = dict(name=f"psoup-shard-{k}", namespace=namespace, num_cpus=0,
                    max_restarts=-1 if where else 0, max_task_retries=0,
                    get_if_exists=True, max_concurrency=1)  # fmt: skip
        if where:
            opts["lifetime"] = "detached"
        if placement is not None:
            opts.update(placement[k])
        # Shard k's checkpoints come k/n of a checkpoint's log apart from shard 0's.
        actor = actor_class.options(**opts).remote(
            k, where, sync, strategy, checkpoint_phase=k / n, cpus=cpus, **engine_options
        )
        with _ours_lock:
            own = _ours["connected"]
            _ours["shards"] += own
        transport = RayTransport(actor, _shard_closed if own else None)
        try:
            channels.append(Channel(k, transport))
        except Exception as err:
            # The shards started so far end with this one, as the server will not run.
            for end in [f for ch in channels for f in (ch.close, ch.transport.close)]:
                with contextlib.suppress(Exception):
                    end()
            with contextlib.suppress(Exception):
                transport.close()
            if not isinstance(err, ray.exceptions.RayActorError) or not err.actor_init_failed:
                raise
            raise RuntimeError(f"shard {k} did not start: {_init_error(err)}") from None
    return channels


def _init_error(err: Exception) -> str:
    """The exception a shard's constructor raised, as one line (Ray's message holds it
    last, after the actor's traceback, in terminal colours)."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(err))
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else type(err).__name__
