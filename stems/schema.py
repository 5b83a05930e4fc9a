"""Stream schemas: the ordered, typed attributes of a stream and its time attribute.

A schema is immutable and knows how each attribute is stored column-wise (its numpy
dtype). It does no validation of user input: that is the job of ``psoup.batch``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

#: The attribute types a stream may declare, with the numpy dtype of their column.
DTYPES: dict[str, np.dtype] = {
    "int": np.dtype(np.int64),
    "float": np.dtype(np.float64),
    "str": np.dtype(object),
}

#: Types that may serve as a stream's time attribute.
TIME_TYPES = ("int", "float")


@dataclass(frozen=True)
class Schema:
    """The attributes of one stream, in declaration order, and its time attribute.

    >>> s = Schema(("a", "t"), ("int", "int"), "t")
    >>> s.index_of("t"), s.type_of("a")
    (1, 'int')
    """

    names: tuple[str, ...]
    types: tuple[str, ...]
    time: str
    _pos: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if len(self.names) != len(self.types):
            raise ValueError("names and types differ in length")
        object.__setattr__(self, "_pos", {n: i for i, n in enumerate(self.names)})
        if len(self._pos) != len(self.names):
            raise ValueError("duplicate attribute name")
        for t in self.types:
            if t not in DTYPES:
                raise ValueError(f"unknown type {t!r}")
        if self.time not in self._pos:
            raise ValueError(f"time attribute {self.time!r} is not an attribute")
        if self.type_of(self.time) not in TIME_TYPES:
            raise ValueError("the time attribute must be int or float")

    def __contains__(self, name: object) -> bool:
        return name in self._pos

    def __len__(self) -> int:
        return len(self.names)

    def index_of(self, name: str) -> int:
        """Position of attribute ``name`` (KeyError if absent). O(1)."""
        return self._pos[name]

    def type_of(self, name: str) -> str:
        """Declared type of attribute ``name``. O(1)."""
        return self.types[self._pos[name]]

    def dtype_of(self, name: str) -> np.dtype:
        """numpy dtype of the column that stores ``name``. O(1)."""
        return DTYPES[self.type_of(name)]

    @property
    def time_index(self) -> int:
        return self._pos[self.time]
