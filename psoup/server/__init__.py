"""The gRPC server: ``start_server(ServerConfig(...))`` in-process, ``psoup serve`` from a shell.

Modules: ``config`` (settings and limits), ``auth`` (bearer tokens), ``worker`` (the
engine thread), ``servicer`` (the RPC methods), ``metrics`` (Stats counters), ``app``
(wiring, health, reflection, TLS, signals).
"""

from psoup.server.app import RunningServer, check_placement, serve_forever, start_server
from psoup.server.config import ServerConfig

__all__ = ["RunningServer", "ServerConfig", "check_placement", "serve_forever", "start_server"]
