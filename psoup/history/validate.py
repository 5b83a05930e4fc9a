"""Historical toll rows as Spark columns: typed values and, for a bad row, why it is rejected.

The input is a CSV file of ``vid,day,xway,tolls`` lines (Linear Road's TollHistory, read
as text so that every malformed line is seen) or a Parquet directory written by
``psoup history export``. ``read`` gives one DataFrame for either, with the columns

============== ===========================================================================
vid .. tolls   bigint values (null when the field is not an integer)
reason         null for a good row, else the first rule it breaks, e.g. ``day 70 is not
               in 1..69``
text           the line as read (Parquet: the values joined by commas)
part, index    the Spark partition and the row's position in it, to number lines
============== ===========================================================================

Every rule is a Spark SQL column expression (split, regex, try_cast, CASE WHEN), so
validation runs in the JVM with no Python work per row. Lines that repeat the header
``vid,day,xway,tolls`` are skipped. ``count`` makes one pass for the counts the summary
and the line numbers need; ``rejects`` gives the rejected rows with their line numbers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from psoup.history import HistoryError
from psoup.history.source import Source
from psoup.history.stream import ATTRS

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

FIRST_DAY, LAST_DAY = 1, 69  # the 10 weeks before the simulation (spec 3.1.3), day 0 excluded
HEADER = ",".join(ATTRS)
_INTEGER = r"^[+-]?[0-9]{1,18}$"  # 18 digits always fit in 64 bits


@dataclass(frozen=True)
class Counts:
    """What one pass over the input found.

    ``lines_before[p]`` is the number of lines in the partitions before ``p`` (header lines
    included), so a row's line number is ``lines_before[part] + index + 1``; None for
    Parquet, whose rows have no line numbers.
    """

    read: int
    rejected: int
    lines_before: list[int] | None

    @property
    def valid(self) -> int:
        return self.read - self.rejected


def is_parquet(source: Source, spark: SparkSession) -> bool:
    """A directory (as Spark writes Parquet) or a ``.parquet`` file; anything else is CSV."""
    return source.name.endswith(".parquet") or source.is_dir(spark)


def read(spark: SparkSession, source: Source) -> DataFrame:
    """The rows of ``source`` (CSV text or Parquet) with their values and reject reasons.

    Lazy: nothing is read until an action runs. Raises HistoryError for a missing input or
    a Parquet input without integer columns ``vid, day, xway, tolls``.
    """
    return _parquet(spark, source) if is_parquet(source, spark) else _text(spark, source)


def _first_reason(checks: list[tuple[Column, Column | str]]) -> Column:
    """CASE WHEN check1 THEN reason1 WHEN ... END: the first rule a row breaks, or null."""
    from pyspark.sql import functions as F

    cond, why = checks[0]
    out = F.when(cond, why)
    for cond, why in checks[1:]:
        out = out.when(cond, why)
    return out


def _range_checks(values: dict[str, Column]) -> list[tuple[Column, Column]]:
    from pyspark.sql import functions as F

    def says(name: str, rule: str) -> Column:
        return F.concat(F.lit(f"{name} "), values[name].cast("string"), F.lit(f" {rule}"))

    day = values["day"]
    return [
        (values["vid"] < 0, says("vid", "is negative")),
        ((day < FIRST_DAY) | (day > LAST_DAY), says("day", f"is not in {FIRST_DAY}..{LAST_DAY}")),
        (values["xway"] < 0, says("xway", "is negative")),
        (values["tolls"] < 0, says("tolls", "is negative")),
    ]


def _text(spark: SparkSession, path: Source) -> DataFrame:
    from pyspark.sql import functions as F

    col = F.col
    # One projection per stage, each naming what the next one uses more than once, so a
    # line is split once and each field parsed once (a single projection repeats them in
    # every CASE branch that refers to them: 15x slower).
    lines = spark.read.text(path.uri).select(
        col("value").alias("text"),
        F.spark_partition_id().alias("part"),
        F.monotonically_increasing_id().alias("mid"),
    )
    keep = ["text", "part", "index", "header"]
    fields = lines.select(
        "text",
        "part",
        # monotonically_increasing_id is (partition << 33) + position within the partition.
        (col("mid") - F.shiftleft(col("part").cast("long"), 33)).alias("index"),
        (F.lower(F.trim(col("text"))) == HEADER).alias("header"),
        F.split(col("text"), ",", -1).alias("fields"),
    )
    raw = fields.select(
        *keep,
        F.size("fields").alias("arity"),
        *(
            F.trim(F.try_element_at("fields", F.lit(i + 1))).alias(f"raw_{a}")
            for i, a in enumerate(ATTRS)
        ),
    )
    parsed = raw.select(
        *keep,
        "arity",
        *(f"raw_{a}" for a in ATTRS),
        *(col(f"raw_{a}").rlike(_INTEGER).alias(f"ok_{a}") for a in ATTRS),
    )
    typed = parsed.select(
        *keep,
        "arity",
        *(f"raw_{a}" for a in ATTRS),
        *(f"ok_{a}" for a in ATTRS),
        *(F.when(col(f"ok_{a}"), col(f"raw_{a}").try_cast("long")).alias(a) for a in ATTRS),
    )
    checks: list[tuple[Column, Column | str]] = [
        (F.trim(col("text")) == "", "blank line"),
        (
            col("arity") != len(ATTRS),
            F.concat(F.lit(f"expected 4 fields ({HEADER}), found "), col("arity").cast("string")),
        ),
    ]
    for a in ATTRS:
        says = F.concat(F.lit(f"{a} is not an integer: '"), col(f"raw_{a}"), F.lit("'"))
        checks.append((~col(f"ok_{a}"), says))
    checks += _range_checks({a: col(a) for a in ATTRS})
    reason = F.when(col("header"), F.lit("header")).otherwise(_first_reason(checks))
    return typed.select(*ATTRS, reason.alias("reason"), *keep)


def _parquet(spark: SparkSession, path: Source) -> DataFrame:
    from pyspark.sql import functions as F
    from pyspark.sql.types import IntegralType

    df = spark.read.parquet(path.uri)
    types = {f.name: f.dataType for f in df.schema.fields}
    missing = [a for a in ATTRS if a not in types]
    if missing:
        raise HistoryError(
            f"{path}: no column {', '.join(missing)}; it has {', '.join(types) or 'none'} "
            f"(a toll history needs integer columns {HEADER})"
        )
    wrong = [
        f"{a} ({types[a].simpleString()})" for a in ATTRS if not isinstance(types[a], IntegralType)
    ]
    if wrong:
        raise HistoryError(f"{path}: columns {', '.join(wrong)} are not integers")
    values = {a: F.col(a).cast("long") for a in ATTRS}
    checks: list[tuple[Column, Column | str]] = [
        (values[a].isNull(), f"{a} is missing") for a in ATTRS
    ]
    checks += _range_checks(values)
    text = F.concat_ws(",", *(F.coalesce(values[a].cast("string"), F.lit("")) for a in ATTRS))
    return df.select(
        *(values[a].alias(a) for a in ATTRS),
        _first_reason(checks).alias("reason"),
        text.alias("text"),
        F.lit(None).cast("int").alias("part"),
        F.lit(None).cast("long").alias("index"),
        F.lit(False).alias("header"),
    )


def count(rows: DataFrame) -> Counts:
    """Rows read (header lines not counted) and rejected, and the lines per partition.

    One Spark job over the input (a scan and a per-partition aggregate of one row each).
    """
    from pyspark.sql import functions as F

    stats = (
        rows.groupBy("part")
        .agg(
            F.count(F.lit(1)).alias("lines"),
            F.sum(F.col("header").cast("long")).alias("headers"),
            F.count("reason").alias("flagged"),  # header lines carry reason "header"
        )
        .collect()
    )
    lines = sum(r["lines"] for r in stats)
    headers = sum(r["headers"] or 0 for r in stats)
    rejected = sum(r["flagged"] for r in stats) - headers
    if all(r["part"] is None for r in stats):  # Parquet
        return Counts(lines - headers, rejected, None)
    per_part = {r["part"]: r["lines"] for r in stats}
    before, total = [], 0
    for p in range(max(per_part, default=-1) + 1):
        before.append(total)
        total += per_part.get(p, 0)
    return Counts(lines - headers, rejected, before)


def good(rows: DataFrame) -> DataFrame:
    """The valid rows' values (``vid, day, xway, tolls``)."""
    return rows.where(rows["reason"].isNull()).select(*ATTRS)


def rejects(rows: DataFrame, counts: Counts) -> DataFrame:
    """``line, reason, text`` of every rejected row, in input order (line null for Parquet)."""
    from pyspark.sql import functions as F

    bad = rows.where(rows["reason"].isNotNull() & ~rows["header"])
    if counts.lines_before is None:
        line = F.lit(None).cast("long")
    else:
        before = F.array(*(F.lit(n) for n in counts.lines_before))
        line = F.element_at(before, F.col("part") + 1) + F.col("index") + 1
    return bad.select(line.alias("line"), "reason", "text")
