"""A Linear Road vehicle as a disconnected psoup client.

It registers its standing queries once (its toll notifications, its accident alerts, its
balance), keeps the handles, and invokes them when its driver asks; a daily expenditure
query over the hydrated ``toll_history`` is registered the first time that (xway, day)
is asked about. All calls go over gRPC through ``PSoupClient``.
"""

from __future__ import annotations

import threading

from clients.psoup_client import PSoupClient
from psoup.linear_road.streams import DAILY_EXPENDITURE, VEHICLE_QUERIES
from psoup.result import Result


class Vehicle:
    """One vehicle's handles. Thread-safe: one vehicle may be asked from several threads."""

    def __init__(self, client: PSoupClient, vid: int):
        self.client = client
        self.vid = vid
        self.handles: dict[str, str] = {}
        self._daily: dict[tuple[int, int], str] = {}
        self._lock = threading.Lock()

    def connect(self) -> None:
        """Register the vehicle's standing queries (once)."""
        with self._lock:
            for name, text in VEHICLE_QUERIES.items():
                if name not in self.handles:
                    self.handles[name] = self.client.register(text, {"v": self.vid})

    def tolls(self) -> Result:
        """Its toll notifications of the last 30 s."""
        self.connect()
        return self.client.invoke(self.handles["tolls"])

    def accidents(self) -> Result:
        """Its accident alerts of the last 30 s."""
        self.connect()
        return self.client.invoke(self.handles["accidents"])

    def balance(self) -> tuple[int, int | None]:
        """(balance, the time it is exact as of: NOW of the assessments stream)."""
        self.connect()
        res = self.client.invoke(self.handles["balance"])
        return int(res.rows[0][0] or 0), res.now

    def daily_expenditure(self, xway: int, day: int) -> int:
        """Its tolls on ``xway`` on ``day`` (1 = yesterday .. 69) from the toll history."""
        with self._lock:
            h = self._daily.get((xway, day))
            if h is None:
                params = {"v": self.vid, "x": xway, "d": day}
                h = self._daily[(xway, day)] = self.client.register(DAILY_EXPENDITURE, params)
        return int(self.client.invoke(h).rows[0][0] or 0)

    def disconnect(self) -> None:
        """Unregister every query of the vehicle."""
        with self._lock:
            for h in [*self.handles.values(), *self._daily.values()]:
                self.client.unregister(h)
            self.handles.clear()
            self._daily.clear()
