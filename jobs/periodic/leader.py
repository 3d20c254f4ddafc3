"""The periodic part of the scheduler leader's pass (called by jobs.scheduler's loop).

On taking the lease the leader writes the schedules declared in code to
their rows (jobs.periodic.declared); on every pass while it leads it runs
the tick pass (jobs.periodic.ticks) and counts what it did.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from jobs.leadership import Leadership
from jobs.periodic.declared import InvalidSchedule, schedules_sync
from jobs.periodic.models import Schedule
from jobs.periodic.ticks import schedules_tick
from jobs.telemetry import schedules as schedule_telemetry

logger = logging.getLogger(__name__)


@dataclass
class PeriodicPass:
    """Per-process state of the periodic pass: the leadership term it last synced in."""

    synced_at_transition: int = -1

    def run(self, leadership: Leadership) -> int:
        """Sync declared schedules once per leadership, then create due ticks; returns jobs made.

        Raises the database's errors.
        """
        if self.synced_at_transition != leadership.transitions:
            try:
                changed = schedules_sync()
            except InvalidSchedule as exc:  # jobs.E031 refuses at start; a hot edit lands here
                logger.error("declared schedules not synced: %s", exc)
            else:
                if changed:
                    logger.info("declared schedules synced: %s rows changed", changed)
            schedule_telemetry.initialize(
                Schedule.objects.filter(enabled=True).values_list("name", flat=True)
            )
            self.synced_at_transition = leadership.transitions
        report = schedules_tick(claimer=leadership.identity)
        if report.ticks:
            schedule_telemetry.record(report)
        return len(report.lags)
