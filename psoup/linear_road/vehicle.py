"""A Linear Road vehicle as a disconnected psoup client, built on the generic client
library (clients/): the application's code, not the library's.

It registers each of its standing queries the first time it is needed (its toll
notifications, its accident alerts, its balance), keeps the handles, and invokes them
when its driver asks; a daily expenditure
query over the hydrated ``toll_history`` is registered the first time that (xway, day)
is asked about. All calls go over gRPC through ``PSoupClient``. The queries are
templates the driver prepares once (``prepare_queries``): a vehicle's registration
sends the template's id and its vid, and the server binds it without parsing it again.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

from clients.messages import Template
from clients.psoup_client import PSoupClient
from psoup.linear_road.streams import DAILY_EXPENDITURE, VEHICLE_QUERIES, balance_answer
from psoup.values import Result

#: A vehicle's queries by name: its three standing queries and the daily expenditure.
QUERIES: dict[str, str] = {**VEHICLE_QUERIES, "daily": DAILY_EXPENDITURE}


def prepare_queries(client: PSoupClient) -> dict[str, Template]:
    """``QUERIES`` prepared as templates on the server behind ``client``: one
    PrepareQuery each. Templates are durable, so they outlive a restart of the server."""
    return {name: client.prepare(text) for name, text in QUERIES.items()}


class Vehicle:
    """One vehicle's handles. Thread-safe: one vehicle may be asked from several threads."""

    def __init__(
        self, client: PSoupClient, vid: int, queries: Mapping[str, Template | str] = QUERIES
    ):
        """``queries``: ``QUERIES``' texts or their templates (``prepare_queries``)."""
        self.client = client
        self.vid = vid
        self.queries = queries
        self.handles: dict[str, str] = {}
        self._daily: dict[tuple[int, int], str] = {}
        self._lock = threading.Lock()

    def _take(
        self, handles: dict, key, query: Template | str, params: dict, now: int | None = None
    ) -> Result:
        """The result as of ``now`` (NOW) of the query kept under ``key`` in ``handles``:
        an invoke, or the first time the registration that answers with it (one round
        trip, not two)."""
        with self._lock:
            h = handles.get(key)
            if h is None:
                h, result = self.client.register_invoke(query, params, now=now)
                handles[key] = h
                return result
        return self.client.invoke(h, now=now)

    def _result(self, name: str, now: int | None = None) -> Result:
        """One of the vehicle's standing queries' result as of ``now`` (NOW)."""
        return self._take(self.handles, name, self.queries[name], {"v": self.vid}, now)

    def tolls(self) -> Result:
        """Its toll notifications of the last 30 s."""
        return self._result("tolls")

    def accidents(self) -> Result:
        """Its accident alerts of the last 30 s."""
        return self._result("accidents")

    def balance(self, t: int) -> tuple[int, int]:
        """(resulttime, balance) for a request at ``t``: ``balance_answer`` over the
        vehicle's balance rows as of ``t``. One call (the first time, the query's
        registration answers with its result)."""
        result = self._result("balance", now=t)
        return balance_answer(result.column("time"), result.column("bal"), t)

    def daily_expenditure(self, xway: int, day: int) -> int:
        """Its tolls on ``xway`` on ``day`` (1 = yesterday .. 69) from the toll history."""
        params = {"v": self.vid, "x": xway, "d": day}
        result = self._take(self._daily, (xway, day), self.queries["daily"], params)
        return int(result.rows[0][0] or 0)

    def disconnect(self) -> None:
        """Unregister every query of the vehicle."""
        with self._lock:
            for h in [*self.handles.values(), *self._daily.values()]:
                self.client.unregister(h)
            self.handles.clear()
            self._daily.clear()
