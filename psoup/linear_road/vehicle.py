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

from clients.messages import Invoke, Register, Registered, Template
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

    def request(
        self, kind: int, t: int, xway: int, day: int
    ) -> tuple[dict, object, str, dict, int | None]:
        """What answers a type-``kind`` request (2: balance at ``t``, 3: the daily
        expenditure on ``xway`` on ``day``): ``(handles, key, query, params, now)``, the
        handle kept as ``handles[key]`` once registered."""
        if kind == 2:
            return self.handles, "balance", self.queries["balance"], {"v": self.vid}, t
        params = {"v": self.vid, "x": xway, "d": day}
        return self._daily, (xway, day), self.queries["daily"], params, None

    def disconnect(self) -> None:
        """Unregister every query of the vehicle."""
        with self._lock:
            for h in [*self.handles.values(), *self._daily.values()]:
                self.client.unregister(h)
            self.handles.clear()
            self._daily.clear()


#: A type-2 or type-3 request: (type, time, vid, xway, day).
Request = tuple[int, int, int, int, int]

#: Items per Batch call (the server takes up to 1,024 by default).
BATCH_ITEMS = 256


class Fleet:
    """Many vehicles' requests answered together: one Batch call per group of requests
    (as a roadside gateway would send them), in which each vehicle's query is
    registered the first time and invoked after. Thread-safe: groups may be answered
    at once from several threads; a vehicle's query that a group is still registering
    is invoked by a later group only once that registration has answered."""

    def __init__(
        self,
        client: PSoupClient,
        queries: Mapping[str, Template | str],
        vehicles: dict[int, Vehicle] | None = None,
    ):
        self.client = client
        self.queries = queries
        self.vehicles = {} if vehicles is None else vehicles
        self._lock = threading.Lock()
        self._claims: dict[tuple[int, object], threading.Event] = {}  # registering now

    def vehicle(self, vid: int) -> Vehicle:
        """The vehicle ``vid``, made the first time it is asked for."""
        with self._lock:
            return self._made(vid)

    def _made(self, vid: int) -> Vehicle:
        """As ``vehicle``, the fleet's lock held by the caller."""
        v = self.vehicles.get(vid)
        if v is None:
            v = self.vehicles[vid] = Vehicle(self.client, vid, self.queries)
        return v

    def answer(self, requests: list[Request]) -> list[tuple[int, int] | int]:
        """Each request's answer, in order: ``(resulttime, balance)`` for a balance,
        the total for a daily expenditure. One Batch call per ``BATCH_ITEMS`` requests,
        and one more round for a vehicle asked twice before its first registration
        answered. Raises what the client raises; registrations answered before that are
        kept (their handles), so asking again is safe."""
        out: list = [None] * len(requests)
        todo = list(range(len(requests)))
        while todo:
            todo = self._round(requests, todo, out)
        return out

    def _round(self, requests: list[Request], todo: list[int], out: list) -> list[int]:
        ops, which, mine, waits, rest = [], [], [], [], []
        with self._lock:  # once for the group: its handles and claims seen together
            for i in todo:
                kind, t, vid, xway, day = requests[i]
                handles, key, query, params, now = self._made(vid).request(kind, t, xway, day)
                h = handles.get(key)
                claim = self._claims.get((vid, key))
                if h is None and claim is None:
                    claim = self._claims[(vid, key)] = threading.Event()
                    mine.append((vid, key, handles))
                    ops.append(Register(query, params, invoke=True, now=now))
                elif h is None:  # registered by a group still in flight: after it
                    waits.append(claim)
                    rest.append(i)
                    continue
                else:
                    ops.append(Invoke(h, now))
                which.append(i)
        try:
            got = []
            for a in range(0, len(ops), BATCH_ITEMS):
                got += self.client.batch(ops[a : a + BATCH_ITEMS])
        finally:
            # The registrations answered (every chunk's before a failed one), in the
            # order they were asked: kept, so that asking again invokes them.
            registered = [g for g in got if isinstance(g, Registered)]
            with self._lock:
                for (_, key, handles), g in zip(mine, registered, strict=False):
                    handles[key] = g.handle
                for vid, key, _ in mine:
                    self._claims.pop((vid, key)).set()
        for i, g in zip(which, got, strict=True):
            result = g.result if isinstance(g, Registered) else g
            kind, t = requests[i][:2]
            if kind == 2:
                out[i] = balance_answer(result.column("time"), result.column("bal"), t)
            else:
                out[i] = int(result.rows[0][0] or 0)
        for claim in waits:
            claim.wait()
        return rest
