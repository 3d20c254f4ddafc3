"""The outage matrix: each outage, the series it leaves, and the one alert it must page.

Shared by the promtool run over the shipped rules at the shipped timings
(tests/ops/test_outage_matrix_rules.py) and the live drills against real
processes (tests/integration/test_outage_matrix.py): `ROWS` names, per
outage, the alert expected and how many instances of it (one per process
that reports the cause: the web and the scheduler both probe the broker and
the database).

The promtool side models a deployment with a web, a scheduler, three
workers on hosts a, b, c and Flower, scraped every STEP seconds. Every
outage starts at OUTAGE_AT and ends at RECOVER_AT; `series_for(row)` gives
each series's samples over the run, built from what the outage does to
each signal: a stopped process's target reads up 0 and the series it served
go stale; a worker's heartbeat ages out OFFLINE_AFTER seconds later; the
probes of the broker and the database read 0.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

STEP = 15  # seconds between scrapes (platform/prometheus/prometheus.yml)
OUTAGE_AT = 5 * 60
RECOVER_AT = 15 * 60
END = 20 * 60
OFFLINE_AFTER = 30  # JOBS_WORKER_OFFLINE_AFTER's default
LEASE = 10  # JOBS_SCHEDULER_LEASE_SECONDS's default: a leader without the database stops then
RENEW = 2  # JOBS_SCHEDULER_RENEW_SECONDS's default
HOSTS = ("host-a", "host-b", "host-c")
WEB = {"job": "celery", "component": "web", "instance": "web:8000"}
SCHEDULER = {"job": "celery", "component": "scheduler", "instance": "scheduler:9809"}
FLOWER = {"job": "flower", "instance": "flower:5555"}


def worker_target(host: str) -> dict[str, str]:
    return {"job": "celery", "component": "worker", "instance": f"{host}:9808"}


@dataclass(frozen=True)
class Row:
    """One outage: `alert` must fire (`instances` of it) and no other alert may.

    `signal_delay`: seconds from the outage to the series that shows it (a
    heartbeat timeout), before the alert's `for` starts counting.
    """

    name: str
    alert: str | None
    instances: int = 1
    signal_delay: float = 0.0


ROWS = (
    Row("calm", None, 0),
    Row("web", "WebDown"),
    Row("one_worker", "WorkerDown", signal_delay=OFFLINE_AFTER),
    Row("all_workers", "NoWorkerUp", signal_delay=OFFLINE_AFTER),
    Row("scheduler", "SchedulerDown"),
    Row("broker", "BrokerDown", instances=2),
    Row("database", "DatabaseDown", instances=2),
    Row("target", "TargetDown"),
    Row("worker_exporter", "TargetDown"),
)
ROW = {row.name: row for row in ROWS}

# A sample: a number, None (no sample: the series is gone) or "stale" (the
# staleness marker Prometheus writes when a target stops answering).
Sample = float | str | None


@dataclass
class Series:
    labels: dict[str, str]
    # value at second t of the run; defaults to 1 throughout
    at: Callable[[int], Sample] = field(default=lambda t: 1.0)

    @property
    def selector(self) -> str:
        name = self.labels["__name__"]
        rest = ",".join(f'{k}="{v}"' for k, v in self.labels.items() if k != "__name__")
        return f"{name}{{{rest}}}"

    def values(self) -> str:
        """promtool's `values` string: one sample per STEP from 0 to END."""
        out = []
        for t in range(0, END + STEP, STEP):
            value = self.at(t)
            out.append("_" if value is None else str(value))
        return " ".join(out)


def _down(start: int, end: int, *, during: Sample = 0.0) -> Callable[[int], Sample]:
    """1 outside [start, end), `during` inside it (None: absent, with a stale marker first)."""

    def at(t: int) -> Sample:
        if start <= t < end:
            if during is None:
                return "stale" if t < start + STEP else None
            return during
        return 1.0

    return at


def baseline() -> dict[str, Series]:
    """Every series of the healthy deployment, by a short key."""
    series = {
        "up:web": Series({"__name__": "up", **WEB}),
        "up:scheduler": Series({"__name__": "up", **SCHEDULER}),
        "up:flower": Series({"__name__": "up", **FLOWER}),
        "leader:scheduler": Series({"__name__": "jobs_scheduler_leader", **SCHEDULER}),
    }
    for host in HOSTS:
        series[f"up:{host}"] = Series({"__name__": "up", **worker_target(host)})
        series[f"worker_up:{host}"] = Series(
            {"__name__": "celery_worker_up", **SCHEDULER, "hostname": host}
        )
    for reporter, labels in (("web", WEB), ("scheduler", SCHEDULER)):
        series[f"broker:{reporter}"] = Series({"__name__": "jobs_broker_up", **labels})
        series[f"database:{reporter}"] = Series({"__name__": "jobs_database_up", **labels})
    return series


def series_for(name: str) -> list[Series]:
    """The series outage `name` of ROWS leaves over the run."""
    s = baseline()
    o, r = OUTAGE_AT, RECOVER_AT
    if name == "web":
        s["up:web"].at = _down(o, r)
        s["broker:web"].at = s["database:web"].at = _down(o, r, during=None)
    elif name == "one_worker":
        s["up:host-c"].at = _down(o, r)
        s["worker_up:host-c"].at = _down(o + OFFLINE_AFTER, r + STEP)
    elif name == "all_workers":
        for i, host in enumerate(HOSTS):
            s[f"up:{host}"].at = _down(o, r)
            # heartbeats were 2 s apart: they age out within a scrape of each other
            s[f"worker_up:{host}"].at = _down(o + OFFLINE_AFTER + STEP * (i > 0), r + STEP)
    elif name == "scheduler":
        s["up:scheduler"].at = _down(o, r)
        for key in (
            *(f"worker_up:{h}" for h in HOSTS),
            "broker:scheduler",
            "database:scheduler",
            "leader:scheduler",
        ):
            s[key].at = _down(o, r, during=None)
    elif name == "broker":
        s["broker:web"].at = s["broker:scheduler"].at = _down(o, r)
        # no heartbeat reaches the scheduler; workers reconnect up to 30 s after the broker
        for host in HOSTS:
            s[f"worker_up:{host}"].at = _down(o + OFFLINE_AFTER, r + 30)
    elif name == "database":
        s["database:web"].at = s["database:scheduler"].at = _down(o, r)
        # the leader cannot renew: it stops leading when its lease runs out, and
        # takes the lease again at its first renewal once the database is back
        s["leader:scheduler"].at = _down(o + LEASE, r + RENEW)
    elif name == "target":
        s["up:flower"].at = _down(o, r)
    elif name == "worker_exporter":
        s["up:host-a"].at = _down(o, r)
    elif name != "calm":
        raise KeyError(name)
    return list(s.values())
