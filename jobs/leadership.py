"""Scheduler leadership: one lease row, judged by the database's clock (docs/scheduler.md).

Any number of schedulers may run; the one whose renewal of the lease row
succeeds leads, the others stand by and try as often. A lease is taken when
it is free, expired (`expires_at` before the database's now()) or already
ours; one conditional UPDATE decides, so two schedulers never both win the
same lease. The leader trusts its lease for `lease_seconds` counted on its own
monotonic clock from before the UPDATE was sent, which ends no later than
the database's `expires_at`: a leader that cannot renew (database gone,
process paused) stops leading before anyone can take over.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from django.db.models import Case, F, Q, When
from django.db.models.functions import Now

from jobs.models import SchedulerLease

logger = logging.getLogger(__name__)

# The lease row of the scheduler loop.
SCHEDULER = "scheduler"


def process_identity() -> str:
    """`host:pid:random`: unique per process, also across a pid reused after a restart."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def lease_take(*, name: str, holder: str, seconds: float) -> bool:
    """Renew the lease `name` for `holder`, or take it when free or expired; True when held.

    `expires_at` becomes the database's now() plus `seconds`. A change of
    holder raises `term` by one and sets `acquired_at`. Raises the
    database's errors.
    """
    free = Q(holder=holder) | Q(expires_at__isnull=True) | Q(expires_at__lt=Now())
    ours = When(holder=holder, then=F("term"))
    taken = (
        SchedulerLease.objects.filter(name=name)
        .filter(free)
        .update(
            holder=holder,
            expires_at=Now() + timedelta(seconds=seconds),
            # Right-hand sides read the row before the update: `holder` is the old holder.
            term=Case(ours, default=F("term") + 1),
            acquired_at=Case(When(holder=holder, then=F("acquired_at")), default=Now()),
        )
    )
    if taken:
        return True
    _, created = SchedulerLease.objects.get_or_create(name=name)
    # A row just created is free: take it (a racing creator may win instead).
    return created and lease_take(name=name, holder=holder, seconds=seconds)


def lease_release(*, name: str, holder: str) -> bool:
    """End `holder`'s lease now, so a standby takes over at its next try; True when it was held."""
    return bool(
        SchedulerLease.objects.filter(name=name, holder=holder).update(expires_at=None, holder="")
    )


def lease_holder(*, name: str = SCHEDULER) -> SchedulerLease | None:
    """The lease row `name` as it is now (None before any scheduler ran)."""
    return SchedulerLease.objects.filter(name=name).first()


@dataclass
class Leadership:
    """This process's view of the lease: `hold()` renews or tries when due; `leading` says.

    `lease_seconds` and `renew_seconds` come from JOBS_SCHEDULER_LEASE_SECONDS
    and JOBS_SCHEDULER_RENEW_SECONDS (renew below lease, jobs.E021). `clock` is
    a monotonic clock in seconds (tests pass a fake).
    """

    identity: str
    lease_seconds: float
    renew_seconds: float
    name: str = SCHEDULER
    clock: Callable[[], float] = time.monotonic
    # Monotonic time until which this process may act as leader (0: standing by).
    valid_until: float = 0.0
    next_try: float = 0.0
    # Changes of state seen by this process (taken, lost), for logs and tests.
    transitions: int = 0
    # Whether the last renewal attempt that answered held the lease.
    held: bool = False

    @property
    def leading(self) -> bool:
        """True while the last successful renewal is younger than the lease."""
        return self.clock() < self.valid_until

    def hold(self) -> bool:
        """Renew (or try to take) the lease when a renewal is due; returns `leading`.

        Raises the database's errors; the lease then runs out on its own
        unless a later call renews it in time.
        """
        now = self.clock()
        if now < self.next_try:
            return self.leading
        was_leading = self.held and self.leading
        # Retry at the renewal pace whatever happens below.
        self.next_try = now + self.renew_seconds
        held = lease_take(name=self.name, holder=self.identity, seconds=self.lease_seconds)
        self.valid_until = now + self.lease_seconds if held else 0.0
        if held and not was_leading:
            self.transitions += 1
            row = lease_holder(name=self.name)
            logger.warning("scheduler %s leads (term %s)", self.identity, row.term if row else "?")
        elif self.held and not held:
            self.transitions += 1
            logger.warning("scheduler %s lost the lease: standing by", self.identity)
        self.held = held
        return held

    def release(self) -> None:
        """Give the lease up (at shutdown) so a standby leads at its next try; errors are logged."""
        if not self.leading:
            return
        self.valid_until = 0.0
        self.held = False
        try:
            lease_release(name=self.name, holder=self.identity)
        except Exception as exc:  # shutting down: the lease then expires on its own
            logger.warning("lease not released (expires on its own): %s", exc)
            return
        logger.info("scheduler %s released the lease", self.identity)
