"""jobs_fuse_state{kind, destination} and jobs_fuse_trips_total{kind, destination} on the web's
/metrics, from the Fuse table (jobs.fuse_model)."""

from __future__ import annotations

import logging
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from jobs.fuse_model import Fuse
from jobs.fuse_rules import WHOLE_KIND
from jobs.kinds import kind_names
from jobs.reasons import FuseState
from observability.metrics import SCRAPE_TIME_SERIES, scrape_family

logger = logging.getLogger(__name__)


class FuseCollector(Collector):
    """Per fuse row: its state (0 closed, 1 half-open, 2 open: FuseState.gauge) and its trips
    (closed -> open, a counter kept in the row); every registered kind also has its
    destination "*" series (0, closed, while it has no row: a kind without a fuse never
    trips), as jobs_paused has every kind. One read of the Fuse table per scrape; nothing is exported
    when the database cannot be read. The alert FuseOpen reads the state."""

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        state = scrape_family("jobs_fuse_state")
        _, labels, help_text = SCRAPE_TIME_SERIES["jobs_fuse_trips_total"]
        trips = CounterMetricFamily("jobs_fuse_trips", help_text, labels=list(labels))
        try:
            rows = {
                (row.kind, row.destination): row
                for row in Fuse.objects.only("kind", "destination", "state", "trips")
            }
            keys = set(rows) | {(kind, WHOLE_KIND) for kind in kind_names()}
            for key in sorted(keys):
                row = rows.get(key)
                value = FuseState(row.state).gauge if row is not None else 0
                state.add_metric(list(key), float(value))
                trips.add_metric(list(key), float(row.trips if row is not None else 0))
        except Exception as exc:  # a scrape reports what it can
            logger.warning("fuse collection failed: %s: %s", type(exc).__name__, exc)
        yield from (state, trips)
