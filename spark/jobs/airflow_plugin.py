"""tidelake's Airflow plugin: the pipeline DAGs' timetable, bounded by the pipeline's own dates.

A pipeline's ``[schedule] start_date`` and ``end_date`` bound its intervals. Given to Airflow
as the DAG's ``start_date`` / ``end_date``, they also become every task's, and Airflow creates
no task instance for a run whose logical date lies outside a task's dates: ``airflow dags
trigger --logical-date`` after ``end_date`` (or before ``start_date``) made a run with no tasks
that "succeeded" at once, having done nothing (apache/airflow#38513). So the pipeline DAG
carries neither; this timetable holds the bounds: the scheduler and ``airflow backfill
create`` make runs only for intervals inside them, and a triggered run gets its tasks, whose
first one fails saying why when its interval is outside them (``dags/tidelake_pipelines.py``,
``require_interval``). Which interval a triggered run covers is the one its logical date names
(``named_interval``; ``dags/tidelake_pipelines.py``, ``run_interval``), not the one Airflow 3.3's
CLI stores on it (the last complete interval before the trigger time, whatever the date).

Airflow deserializes a timetable that is not its own only if a plugin registers it: installing
tidelake where Airflow runs registers this one (the ``airflow.plugins`` entry point in
pyproject.toml), for the dag-processor, the scheduler and the api-server alike.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from airflow._shared.timezones.timezone import coerce_datetime, parse_timezone
from airflow.plugins_manager import AirflowPlugin
from airflow.timetables.base import DagRunInfo, DataInterval, TimeRestriction
from airflow.timetables.interval import CronDataIntervalTimetable


class PipelineTimetable(CronDataIntervalTimetable):
    """Cron data intervals that start at or after ``start`` and end at or before ``end`` (if any)."""

    def __init__(self, cron: str, timezone: Any, *, start: dt.datetime, end: dt.datetime | None = None) -> None:
        super().__init__(cron, timezone)
        self.start = coerce_datetime(start)  # pendulum: the cron arithmetic needs it
        self.end = None if end is None else coerce_datetime(end)
        bounds = f"intervals from {self.start.isoformat()}" + ("" if end is None else f" ending by {self.end.isoformat()}")
        self.description = f"{self.description}; {bounds}" if self.description else bounds

    def next_dagrun_info(self, *, last_automated_data_interval: DataInterval | None,
                         restriction: TimeRestriction) -> DagRunInfo | None:
        earliest = self.start if restriction.earliest is None else max(coerce_datetime(restriction.earliest), self.start)
        info = super().next_dagrun_info(last_automated_data_interval=last_automated_data_interval,
                                        restriction=TimeRestriction(earliest, restriction.latest, restriction.catchup))
        if info is not None and self.end is not None and info.data_interval.end > self.end:
            return None
        return info

    def named_interval(self, logical_date: dt.datetime) -> DataInterval:
        """The interval a logical date names: the interval it starts, if it is an interval start of the
        cron (as a scheduled or backfill run's logical date is); otherwise the last interval complete at it
        (what Airflow's REST API gives a triggered run)."""
        when = coerce_datetime(logical_date)
        if self._align_to_prev(when) == when:
            return DataInterval(when, self._get_next(when))
        return self.infer_manual_data_interval(run_after=when)

    def serialize(self) -> dict[str, Any]:
        return {**super().serialize(), "start": self.start.isoformat(), "end": self.end and self.end.isoformat()}

    @classmethod
    def deserialize(cls, data: dict[str, Any]) -> PipelineTimetable:
        end = data["end"]
        return cls(data["expression"], parse_timezone(data["timezone"]), start=dt.datetime.fromisoformat(data["start"]),
                   end=None if end is None else dt.datetime.fromisoformat(end))

    @property
    def summary(self) -> str:
        return self._expression if self.end is None else f"{self._expression} until {self.end.isoformat()}"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PipelineTimetable):
            return NotImplemented
        return super().__eq__(other) and (self.start, self.end) == (other.start, other.end)

    def __hash__(self) -> int:
        return hash((super().__hash__(), self.start, self.end))


class TidelakePlugin(AirflowPlugin):
    name = "tidelake"
    timetables = [PipelineTimetable]
