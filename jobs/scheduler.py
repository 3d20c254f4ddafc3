"""The scheduler loop: due retries, periodic ticks, the outbox, lost messages and expired leases.

Retries wait here, in the database, not as delayed messages inside a worker, so
worker memory and prefetch stay flat however many retries are pending. Any
number of schedulers may run: only the one holding the lease (jobs.leadership)
runs the passes, the others renew nothing and try to take the lease as often
as the leader renews it (docs/scheduler.md).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from datetime import datetime

from django.conf import settings
from django.db import DatabaseError, close_old_connections

from jobs import brokers, rate_pacer, selectors, services, state_store
from jobs.leadership import Leadership, process_identity
from jobs.periodic.leader import PeriodicPass

logger = logging.getLogger(__name__)

# The outbox and lease sweeps need not run on every tick.
SWEEP_EVERY_SECONDS = 1.0
# Rows one lost-message check examines, oldest first: a flushed broker under
# a larger backlog is worked through this many per two checks.
LOST_MESSAGE_LIMIT = 10_000


class BrokerRestartWatch:
    """Notices a broker restart by its changed run_id; returns when it was first seen running.

    A broker whose run_id is "" (RabbitMQ: quorum queues keep their messages
    across a restart) is never reported restarted.
    """

    def __init__(self, *, adapter: brokers.Broker | None = None) -> None:
        self.run_id: str | None = None
        self.adapter = adapter or brokers.current()

    def restarted(self) -> bool:
        """True once after the broker's run_id changed; False while unreachable or unchanged."""
        try:
            run_id = self.adapter.server_run_id()
        except Exception:  # unreachable or unreadable: no verdict this time
            return False
        if not run_id:
            return False
        previous, self.run_id = self.run_id, run_id
        return previous is not None and previous != run_id


class LostMessageWatch:
    """Republishes queued jobs whose message vanished, once two consecutive checks found them.

    jobs.services.lost_messages finds the suspects. A consumer holds a message
    for microseconds between taking it from a list and recording it as
    unacknowledged, so one sighting proves nothing; the next check,
    `interval` seconds later (JOBS_LOST_MESSAGE_CHECK_INTERVAL by default),
    sees such a message recorded or its attempt started. A queued job whose
    message a consumer holds unacknowledged (reason "held": its worker may
    have died with it) is republished once every check for `held_after`
    seconds (JOBS_REPUBLISH_AFTER) found it held, timed on this process's
    monotonic clock, not on the consumer's host clock or the publish time.
    The sightings live in this process: a restarted scheduler confirms afresh.
    """

    def __init__(
        self,
        *,
        interval: float | None = None,
        held_after: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.clock = clock  # seconds, monotonic
        self.interval = settings.JOBS_LOST_MESSAGE_CHECK_INTERVAL if interval is None else interval
        self.held_after = settings.JOBS_REPUBLISH_AFTER if held_after is None else held_after
        self.pending: dict[uuid.UUID, services.Suspect] = {}
        # held jobs: (published_at, self.clock() of the first sighting in a row)
        self.held_since: dict[uuid.UUID, tuple[datetime | None, float]] = {}
        self.next_check = 0.0  # self.clock() of the next check

    def reset(self) -> None:
        """Forget every sighting (the next suspects need two checks again)."""
        self.pending = {}
        self.held_since = {}

    def check(self, *, publish_limit: int, claimer: str = "") -> int:
        """Run a check when one is due; returns how many jobs were put back for publishing.

        Publishes at most `publish_limit` of them at once (outbox_sweep does
        the rest). An unreadable broker is logged and skipped; raises the
        database's errors.
        """
        if self.clock() < self.next_check:
            return 0
        self.next_check = self.clock() + self.interval
        try:
            found = services.lost_message_suspects(
                queues=list(settings.JOBS_QUEUES),
                margin=settings.JOBS_LOST_MESSAGE_MARGIN,
                held_after=0.0,  # every held job: how long it is held is timed here
                limit=LOST_MESSAGE_LIMIT,
            )
        except DatabaseError:
            self.reset()
            raise
        except Exception as exc:  # kombu/redis raise many types for one outage
            self.reset()  # "consecutive" means no failed check in between
            logger.warning("lost-message check skipped: %s: %s", type(exc).__name__, exc)
            return 0
        confirmed = self._confirmed(found, now=self.clock())
        if not confirmed:
            return 0
        return services.lost_messages_republish(
            suspects=confirmed, publish_limit=publish_limit, claimer=claimer
        )

    def _confirmed(
        self, found: dict[uuid.UUID, services.Suspect], *, now: float
    ) -> list[services.Suspect]:
        """Suspects of this check that earlier checks confirm; keeps the rest's sightings."""
        confirmed: list[services.Suspect] = []
        pending: dict[uuid.UUID, services.Suspect] = {}
        held_since: dict[uuid.UUID, tuple[datetime | None, float]] = {}
        for job_id, suspect in found.items():
            if suspect.reason == services.SuspectReason.HELD:
                published_at, since = self.held_since.get(job_id, (None, now))
                if published_at != suspect.published_at:
                    since = now  # held afresh (republished or requeued in between)
                held_since[job_id] = (suspect.published_at, since)
                if since < now and now - since >= self.held_after:
                    confirmed.append(suspect)
            elif (seen := self.pending.get(job_id)) is not None and (
                seen.published_at == suspect.published_at
            ):
                confirmed.append(suspect)
            else:
                pending[job_id] = suspect
        self.pending, self.held_since = pending, held_since
        return confirmed


def sweep(
    *,
    batch: int,
    watch: BrokerRestartWatch,
    lost: LostMessageWatch,
    judge_leases: bool = True,
    leadership: Leadership | None = None,
) -> None:
    """One pass of the slower sweeps: a broker restart, the outbox, expired leases, lost messages.

    `judge_leases` False skips the lease sweep (just after a database
    outage, while workers still write the outcomes they kept on disk).
    With `leadership`, each step runs only while this process still leads
    (the lease is renewed between steps when due) and claims rows in its name.
    """

    def leading() -> bool:
        return leadership is None or leadership.hold()

    claimer = leadership.identity if leadership is not None else ""
    now = selectors.database_now()
    if watch.restarted():
        logger.warning("broker restarted (new run_id): republishing every queued job")
        while leading() and services.outbox_reopen(published_before=now, limit=batch) == batch:
            pass
        lost.reset()
    if not leading():
        return
    services.outbox_sweep(limit=batch, claimer=claimer)
    # Outcomes a worker could not write are kept on its host and written by
    # it (jobs.spool_drainer); JOBS_LEASE_RECOVERY_GRACE gives it the time.
    # The Redis state store keeps a second copy, written here when Redis
    # answers; it never holds the lease sweep back (issue 21).
    if not state_store.uses_postgres():
        try:
            services.outcomes_drain(limit=batch)
        except DatabaseError:
            raise
        except Exception as exc:  # Redis unreachable: the hosts' own copies remain
            logger.warning("spooled outcomes not read from Redis: %s", exc)
    if judge_leases and leading():
        services.leases_expire(limit=batch)
    if leading():
        lost.check(publish_limit=batch, claimer=claimer)
        dead_letters_drain(adapter=watch.adapter, limit=batch)


def dead_letters_drain(*, adapter: brokers.Broker, limit: int) -> int:
    """End the jobs whose message the broker dropped past its delivery limit; returns how many.

    An unreadable broker is logged and skipped; raises the database's errors.
    """
    try:
        letters = adapter.dead_letters(limit=limit)
    except Exception as exc:  # kombu/py-amqp raise many types for one outage
        logger.warning("dead-letter queue not read: %s: %s", type(exc).__name__, exc)
        return 0
    return services.dead_letters_record(letters=letters) if letters else 0


def scheduler_leadership() -> Leadership:
    """A Leadership for this process from JOBS_SCHEDULER_LEASE_SECONDS / _RENEW_SECONDS."""
    return Leadership(
        identity=process_identity(),
        lease_seconds=settings.JOBS_SCHEDULER_LEASE_SECONDS,
        renew_seconds=settings.JOBS_SCHEDULER_RENEW_SECONDS,
    )


def run_scheduler(
    *,
    stop: threading.Event,
    interval: float | None = None,
    leadership: Leadership | None = None,
) -> None:
    """Loop until `stop` is set, leading while `leadership` holds the lease (a new one when None).

    `interval` (seconds) defaults to JOBS_SCHEDULER_INTERVAL. The lease is
    released when the loop ends, so a standby leads at its next try.
    """
    interval = settings.JOBS_SCHEDULER_INTERVAL if interval is None else interval
    leadership = leadership or scheduler_leadership()
    batch = settings.JOBS_SCHEDULER_BATCH
    watch = BrokerRestartWatch()
    lost = LostMessageWatch()
    try:
        watch.adapter.declare(list(settings.JOBS_QUEUES))
    except Exception as exc:  # declared again by the first publish; drops wait for the next start
        logger.warning("broker objects not declared: %s: %s", type(exc).__name__, exc)
    periodic = PeriodicPass()
    last_sweep = 0.0
    # Since when the database has answered every pass (None: the last one failed).
    # Leases are judged only JOBS_LEASE_RECOVERY_GRACE seconds after that, at
    # start too: a worker may hold outcomes on disk from before (jobs.spool_drainer).
    db_ok_since: float | None = time.monotonic()
    logger.info(
        "scheduler started interval=%ss batch=%s identity=%s", interval, batch, leadership.identity
    )
    try:
        while not stop.is_set():
            promoted = 0
            try:
                if not leadership.hold():
                    # Standing by: sightings of lost messages are the leader's to confirm.
                    lost.reset()
                    stop.wait(max(interval, leadership.next_try - leadership.clock()))
                    continue
                promoted = services.retries_promote_due(limit=batch, claimer=leadership.identity)
                # Jobs held by a pause that ended: published within one tick of the resume.
                promoted += services.held_release(limit=batch, claimer=leadership.identity)
                # Jobs held for a concurrency slot: the oldest, into the slots free now.
                promoted += services.concurrency_release(limit=batch, claimer=leadership.identity)
                # Jobs held by a fuse: a closed fuse's, an open fuse's due probe.
                promoted += services.fuse_release(limit=batch, claimer=leadership.identity)
                # Periodic schedules: each due tick's job, once (jobs.periodic).
                if leadership.hold():
                    periodic.run(leadership)
                if db_ok_since is None:
                    db_ok_since = time.monotonic()
                if time.monotonic() - last_sweep >= SWEEP_EVERY_SECONDS:
                    sweep(
                        batch=batch,
                        watch=watch,
                        lost=lost,
                        judge_leases=time.monotonic() - db_ok_since
                        >= settings.JOBS_LEASE_RECOVERY_GRACE,
                        leadership=leadership,
                    )
                    last_sweep = time.monotonic()
            except DatabaseError as exc:
                logger.warning("scheduler pass failed: %s", exc)
                db_ok_since = None
                close_old_connections()
            except Exception:
                # One bad pass must not stop retries, the outbox and the lease sweep for good.
                logger.exception("scheduler pass failed")
            if promoted < batch:
                # Jobs held for a rate limit are published at their reserved starts meanwhile.
                rate_pacer.wait_releasing(stop, interval, claimer=leadership.identity, batch=batch)
    finally:
        leadership.release()
    logger.info("scheduler stopped")
