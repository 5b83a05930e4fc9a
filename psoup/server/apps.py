"""Applications that run inside the server: ``psoup serve --app NAME[=ARG]``.

An application is a function ``install(engine)`` or, given an argument,
``install(engine, arg)``, run on the engine thread before anything else: it declares its
streams and attaches its triggers (``Engine.add_trigger``) and its state
(``Engine.add_state``, kept in checkpoints). From then on the server serves its streams
like any other. The server knows applications only by name, through the Python entry
points of the group ``psoup.applications`` (Linear Road's is declared in
pyproject.toml), or by a ``package.module:function`` path, so it imports no application's
code. A data directory records the application it was written with, because its log is
replayed through that application's triggers.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import entry_points

GROUP = "psoup.applications"


@dataclass(frozen=True)
class AppSpec:
    """An application by name (an entry point, or ``module:function``) and argument."""

    name: str
    arg: str | None = None

    @classmethod
    def parse(cls, text: str) -> AppSpec:
        """``NAME`` or ``NAME=ARG``; ValueError for an empty name."""
        name, sep, arg = text.partition("=")
        if not name.strip():
            raise ValueError(f"--app {text!r}: expected NAME or NAME=ARG")
        return cls(name.strip(), arg if sep else None)

    @property
    def key(self) -> str:
        """How a data directory names it (``linear-road:validator``)."""
        return f"{self.name}:{self.arg}" if self.arg is not None else self.name

    def load(self) -> Callable[..., object]:
        """The install function. ValueError naming the application and the installed
        ones when there is no such entry point or function."""
        found = [ep for ep in entry_points(group=GROUP) if ep.name == self.name]
        if found:
            return found[0].load()
        module, sep, attr = self.name.partition(":")
        if sep:
            try:
                return getattr(importlib.import_module(module), attr)
            except (ImportError, AttributeError) as err:
                raise ValueError(f"--app {self.name}: {err}") from None
        names = ", ".join(sorted(ep.name for ep in entry_points(group=GROUP))) or "none"
        raise ValueError(
            f"--app {self.name}: no such application (installed: {names}; or give "
            "package.module:function)"
        )

    def install(self, engine) -> None:
        """Load the application and install it on ``engine`` (on the engine thread)."""
        fn = self.load()
        if self.arg is None:
            fn(engine)
        else:
            fn(engine, self.arg)
