"""`make observe`: `make up`'s stack watched by Debian's Prometheus and Alertmanager, no Docker.

Runs web, worker, scheduler and Flower (as `make up` does), then
`prometheus` with platform/prometheus/prometheus.yml rendered for their
localhost ports and the same rule files (platform/prometheus/alerts.yml),
and `prometheus-alertmanager` with platform/alertmanager/alertmanager.yml,
whose loopback webhook is served here and printed: every notification shows
on the console. Missing binaries are installed with apt-get (as root).
Prometheus keeps its data in var/observe/prometheus/ between runs.
Ctrl-C (or SIGTERM) stops every process by pid, newest first.
"""

from __future__ import annotations

import signal
from contextlib import ExitStack

from config.env import env
from devstack.alertmanager import AlertmanagerServer, AlertSink
from devstack.debian import MissingBinary, ensure_binary
from devstack.demo import (
    ADMIN_USERNAME,
    DEFAULT_REDIS_URL,
    port_or_free,
    private_redis,
    provision,
    say,
    serve,
    signal_as_interrupt,
    watch,
)
from devstack.processes import ROOT, Stack
from devstack.prometheus import SHIPPED_RULES, PrometheusServer
from devstack.services import wait_for

OBSERVE_DIR = ROOT / "var" / "observe"
# Local scrapes and evaluations are cheap: every 5 s rather than compose's 15 s.
INTERVAL = "5s"


def run_observe() -> int:
    """Start everything, print the URLs, wait for Ctrl-C; returns the exit code."""
    # SIGINT too: started in the background, a process inherits SIGINT ignored.
    signal.signal(signal.SIGINT, signal_as_interrupt)
    signal.signal(signal.SIGTERM, signal_as_interrupt)
    try:
        for binary in ("prometheus", "prometheus-alertmanager"):
            say(f"{binary}: {ensure_binary(binary)}")
    except MissingBinary as exc:
        say(str(exc))
        return 1
    password = env.str("DEVSTACK_ADMIN_PASSWORD", default="admin")
    flower_auth = env.str("FLOWER_BASIC_AUTH", default="admin:admin")
    ports = {
        "web": port_or_free(8000),
        "worker": port_or_free(env.int("JOBS_WORKER_METRICS_PORT", default=9808)),
        "scheduler": port_or_free(env.int("JOBS_SCHEDULER_METRICS_PORT", default=9809)),
        "flower": port_or_free(5555),
        "prometheus": port_or_free(9090),
        "alertmanager": port_or_free(9093),
        "webhook": port_or_free(9095),
    }

    def observe(cleanup: ExitStack) -> int:
        redis_url = cleanup.enter_context(
            private_redis(env.str("REDIS_URL", default=DEFAULT_REDIS_URL))
        )
        stack = Stack(
            env={
                "DJANGO_SETTINGS_MODULE": "config.settings.local",
                "REDIS_URL": redis_url,
                "CELERY_BROKER_URL": env.str("CELERY_BROKER_URL", default=redis_url),
                "FLOWER_BASIC_AUTH": flower_auth,
                "JOBS_WORKER_METRICS_PORT": str(ports["worker"]),
                "JOBS_SCHEDULER_METRICS_PORT": str(ports["scheduler"]),
            },
            logdir=OBSERVE_DIR / "logs",
        )
        cleanup.callback(stack.stop)
        token = provision(stack, username=ADMIN_USERNAME, password=password)
        stack.start_web(ports["web"])
        stack.start_worker(concurrency=env.int("JOBS_WORKER_CONCURRENCY", default=2))
        stack.start_scheduler()
        stack.start("flower", "--address=127.0.0.1", f"--port={ports['flower']}")
        sink = AlertSink(ports["webhook"], echo=True).start()
        cleanup.callback(sink.stop)
        alertmanager = AlertmanagerServer(webhook_url=sink.url, port=ports["alertmanager"])
        cleanup.callback(alertmanager.stop)
        alertmanager.start()
        local = "127.0.0.1"
        prometheus = PrometheusServer(
            {
                "celery": [
                    (f"{local}:{ports['web']}", {"component": "web"}),
                    (f"{local}:{ports['worker']}", {"component": "worker"}),
                    (f"{local}:{ports['scheduler']}", {"component": "scheduler"}),
                ],
                "flower": [(f"{local}:{ports['flower']}", {})],
            },
            rule_files=[SHIPPED_RULES],
            scrape_interval=INTERVAL,
            evaluation_interval=INTERVAL,
            alertmanagers=[alertmanager.address],
            port=ports["prometheus"],
            workdir=OBSERVE_DIR / "prometheus",
        )
        cleanup.callback(prometheus.stop)
        prometheus.start()
        wait_for(
            lambda: prometheus.query('up{job="celery", component="web"} == 1'),
            timeout=60,
            what="the first scrape",
        )
        print(
            f"\nadmin:        http://{local}:{ports['web']}/admin/  "
            f"(login {ADMIN_USERNAME} / {password})\n"
            f"api:          http://{local}:{ports['web']}/api/jobs/  "
            f"(header 'Authorization: Token {token}')\n"
            f"flower:       http://{local}:{ports['flower']}/  (basic auth {flower_auth})\n"
            f"prometheus:   {prometheus.url}/alerts  (rules: platform/prometheus/alerts.yml)\n"
            f"alertmanager: {alertmanager.url}/  (notifications print here as [alert] lines)\n"
            f"logs:         {stack.logdir.relative_to(ROOT)}/   Ctrl-C stops everything.\n",
            flush=True,
        )
        return watch(stack, {"prometheus": prometheus, "alertmanager": alertmanager})

    return serve("observe", observe)
