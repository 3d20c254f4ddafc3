"""`make observe`: `make up`'s stack watched by Debian's Prometheus and Alertmanager, no Docker.

Runs web, worker, scheduler, Flower and nginx (devstack.up.start_app),
then `prometheus` with platform/prometheus/prometheus.yml rendered for their
own loopback ports (what compose scrapes on its internal network) and the
same rule files (platform/prometheus/alerts.yml), and
`prometheus-alertmanager` with platform/alertmanager/alertmanager.yml,
whose loopback webhook is served here and printed: every notification shows
on the console. Missing binaries are installed with apt-get (as root).
Prometheus keeps its data in var/observe/prometheus/ between runs. Every
port is an environment variable (devstack.ports), checked before anything
starts. Ctrl-C (or SIGTERM) stops every process by pid, newest first.
"""

from __future__ import annotations

from contextlib import ExitStack

from devstack import ports as port_vars
from devstack.alertmanager import AlertmanagerServer, AlertSink
from devstack.debian import MissingBinary, ensure_binary
from devstack.demo import say
from devstack.processes import ROOT
from devstack.prometheus import SHIPPED_RULES, PrometheusServer
from devstack.services import wait_for
from devstack.up import Link, answers, print_links, serve, start_app, watch

OBSERVE_DIR = ROOT / "var" / "observe"
# Local scrapes and evaluations are cheap: every 5 s rather than compose's 15 s.
INTERVAL = "5s"
# Where Prometheus lists its alerts: the classic UI (Debian's 2.x ships no new
# UI, so /alerts is a 404 there), else the new UI's page.
ALERT_PAGES = ("/classic/alerts", "/alerts")


def run_observe() -> int:
    """Start everything, print the URLs, wait for Ctrl-C; returns the exit code."""
    try:
        ports = port_vars.claim(port_vars.OBSERVE_PORTS)
    except port_vars.PortError as exc:
        say(str(exc))
        return 1
    try:
        for binary in ("nginx", "prometheus", "prometheus-alertmanager"):
            say(f"{binary}: {ensure_binary(binary)}")
    except MissingBinary as exc:
        say(str(exc))
        return 1

    def observe(cleanup: ExitStack) -> int:
        app = start_app(cleanup, ports=ports, rundir=OBSERVE_DIR)
        sink = AlertSink(ports[port_vars.ALERT_WEBHOOK], echo=True).start()
        cleanup.callback(sink.stop)
        alertmanager = AlertmanagerServer(webhook_url=sink.url, port=ports[port_vars.ALERTMANAGER])
        cleanup.callback(alertmanager.stop)
        alertmanager.start()
        local = "127.0.0.1"
        prometheus = PrometheusServer(
            {
                "celery": [
                    (f"{local}:{ports[port_vars.WEB]}", {"component": "web"}),
                    (f"{local}:{ports[port_vars.WORKER_METRICS]}", {"component": "worker"}),
                    (f"{local}:{ports[port_vars.SCHEDULER_METRICS]}", {"component": "scheduler"}),
                ],
                "flower": [(f"{local}:{ports[port_vars.FLOWER]}", {})],
            },
            rule_files=[SHIPPED_RULES],
            scrape_interval=INTERVAL,
            evaluation_interval=INTERVAL,
            alertmanagers=[alertmanager.address],
            port=ports[port_vars.PROMETHEUS],
            workdir=OBSERVE_DIR / "prometheus",
        )
        cleanup.callback(prometheus.stop)
        prometheus.start()
        wait_for(
            lambda: prometheus.query('up{job="celery", component="web"} == 1'),
            timeout=60,
            what="the first scrape",
        )
        alerts_page = next(
            (page for page in ALERT_PAGES if answers(f"{prometheus.url}{page}")), "/graph"
        )
        links = [
            *app.links(),
            Link(
                "prometheus",
                f"{prometheus.url}{alerts_page}",
                "rules: platform/prometheus/alerts.yml",
            ),
            Link(
                "alertmanager",
                f"{alertmanager.url}/api/v2/alerts",
                "its API (Debian's has no web UI); notifications print here as [alert] lines",
            ),
        ]
        print_links(
            links, footer=f"logs:   {(OBSERVE_DIR / 'logs').relative_to(ROOT)}/", token=app.token
        )
        return watch(
            app.stack,
            {"nginx": app.proxy, "prometheus": prometheus, "alertmanager": alertmanager},
        )

    return serve("observe", observe)
