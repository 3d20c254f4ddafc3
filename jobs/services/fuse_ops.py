"""Fuses for callers: trip and reset by an operator (with History), the list, the leader's release.

A fuse trips by itself (jobs.engine.fusing.record); an operator may also
trip one (the kind's destination is down, say so before the failures do)
or reset one (closed at once, its held jobs published at the leader's next
tick). Only a kind whose policy turns its fuse on can be tripped: the start
judges no other kind against a fuse (jobs.fuse_gate). Every trip and reset
by a user is in the admin History (a LogEntry on the Fuse row).
"""

from __future__ import annotations

import logging
from typing import Any

from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.contenttypes.models import ContentType
from django.db import transaction

from jobs import clock, fuse_gate
from jobs.engine import current as current_engine
from jobs.engine import fusing
from jobs.engine.values import Sweep
from jobs.errors import JobsError
from jobs.fuse_model import Fuse
from jobs.fuse_rules import WHOLE_KIND
from jobs.reasons import FuseState
from jobs.services.sweeps import publish_claimed

logger = logging.getLogger(__name__)


def fuse_config(kind: str) -> fuse_gate.FuseConfig:
    """The fuse of `kind`; raises JobsError (field "kind") when it has none."""
    found = fuse_gate.configs()
    if kind not in found:
        names = ", ".join(sorted(found)) or "none"
        raise JobsError(
            f"kind {kind!r} has no fuse (policy `fuse: true`); kinds with one: {names}",
            field="kind",
        )
    return found[kind]


def fuse_trip(
    *, kind: str, destination: str = WHOLE_KIND, actor: Any = None, reason: str = "", via: str
) -> Fuse:
    """Open the fuse of `kind` for `destination` now, for its cool-down (then one probe runs).
    Raises JobsError for a kind without a fuse."""
    config = fuse_config(kind)
    return _change(config, destination, actor=actor, reason=reason, via=via, opening=True)


def fuse_reset(
    *, kind: str, destination: str = WHOLE_KIND, actor: Any = None, reason: str = "", via: str
) -> Fuse:
    """Close the fuse of `kind` for `destination` now; its held jobs are published at the
    leader's next tick. Raises JobsError for a kind without a fuse."""
    config = fuse_config(kind)
    return _change(config, destination, actor=actor, reason=reason, via=via, opening=False)


def _change(
    config: fuse_gate.FuseConfig,
    destination: str,
    *,
    actor: Any,
    reason: str,
    via: str,
    opening: bool,
) -> Fuse:
    user = actor if getattr(actor, "is_authenticated", False) else None
    now = clock.now()
    with transaction.atomic():
        row = fusing.operate(
            config, destination, opening=opening, user=user, reason=reason, now=now
        )
        verb = "Tripped" if opening else "Reset"
        if user is not None:
            LogEntry.objects.create(
                user_id=user.pk,
                content_type=ContentType.objects.get_for_model(Fuse),
                object_id=str(row.pk),
                object_repr=str(row)[:200],
                action_flag=CHANGE,
                change_message=(f"{verb} via {via}: {reason}" if reason else f"{verb} via {via}.")[
                    :1000
                ],
            )
    logger.warning(
        "fuse %s kind=%s destination=%s via %s: %s",
        verb.lower(),
        config.kind,
        destination,
        via,
        reason or "(no reason)",
    )
    return row


def fuses_list() -> list[Fuse]:
    """Every fuse row, open ones first."""
    order = {FuseState.OPEN: 0, FuseState.HALF_OPEN: 1, FuseState.CLOSED: 2}
    rows = list(Fuse.objects.select_related("changed_by").order_by("kind", "destination"))
    return sorted(rows, key=lambda row: order.get(FuseState(row.state), 3))


def fuse_release(*, limit: int = 500, claimer: str = "") -> int:
    """Publish the held jobs fuses let start now (a closed fuse's, an open fuse's due probe);
    returns how many. The leader calls it every tick; one read of the (partial-indexed) held
    rows when none are held."""
    ids = current_engine().release_fused(Sweep(limit=limit, claimer=claimer))
    if ids:
        publish_claimed(job_ids=ids, claimer=claimer)
    return len(ids)
