"""A progress bar of a Spark phase's finished tasks, fed by Spark's status tracker.

Spark's own console progress bar is off (see ``spark``); instead the jobs a phase starts
carry a job group, and a thread polls ``sc.statusTracker()`` for the tasks of that
group's stages, on the driver, a few times a second. Tasks are the finest progress Spark
reports while a stage runs (accumulators only arrive when a task ends).
"""

from __future__ import annotations

import threading
import uuid
from typing import TYPE_CHECKING

from psoup.progress import progress_bar

if TYPE_CHECKING:
    from pyspark import SparkContext


class Phase:
    """``with Phase(sc, "validate"):`` shows a bar of the block's Spark tasks on stderr.

    ``enabled=False`` shows nothing but still names the jobs. Polling costs a few py4j
    calls per stage every ``interval`` seconds.
    """

    def __init__(self, sc: SparkContext, desc: str, enabled: bool = True, interval: float = 0.25):
        self.sc = sc
        self.desc = desc
        self.enabled = enabled
        self.interval = interval
        self.group = f"psoup-{uuid.uuid4().hex[:12]}"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._bar = None

    def _tasks(self) -> tuple[int, int]:
        """(finished, total) tasks of the group's jobs so far."""
        tracker = self.sc.statusTracker()
        done = total = 0
        for job_id in tracker.getJobIdsForGroup(self.group):
            job = tracker.getJobInfo(job_id)
            if job is None:
                continue
            for stage_id in job.stageIds:
                stage = tracker.getStageInfo(stage_id)
                if stage is None:
                    continue
                done += stage.numCompletedTasks
                # A finished job's stages that never ran were skipped (shuffle reused).
                total += stage.numCompletedTasks if job.status == "SUCCEEDED" else stage.numTasks
        return done, total

    def _poll(self) -> None:
        assert self._bar is not None
        while not self._stop.wait(self.interval):
            try:
                done, total = self._tasks()
            except Exception:  # the context is stopping: the bar is cosmetic
                return
            if (done, max(total, 1)) != (self._bar.n, self._bar.total):
                self._bar.total = max(total, 1)
                self._bar.n = done
                self._bar.refresh()

    def __enter__(self) -> Phase:
        self.sc.setJobGroup(self.group, self.desc)
        if self.enabled:
            self._bar = progress_bar(total=1, desc=self.desc, unit="task", leave=True)
            self._thread = threading.Thread(target=self._poll, name="spark-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, exc_type, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._bar is not None:
            if exc_type is None:
                self._bar.n = self._bar.total
            self._bar.close()
        self.sc.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
