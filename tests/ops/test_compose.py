"""docker-compose.yml: valid for Debian's docker-compose, the Procfile's commands, gates and volumes.

Issue 9, Acceptance: "Debian's `docker-compose -f docker-compose.yml config
-q` passes; a test checks that every app service's command matches the
Procfile." No Docker engine runs here: the file is validated by
docker-compose and read as YAML (anchors and merge keys resolved).
"""

from __future__ import annotations

import re
import shlex

import pytest

from devstack.nginx import TEMPLATE, limits_from_env, placeholders
from devstack.processes import procfile_commands
from tests.ops.settings_env import env_example, reads
from tests.ops.tools import PLATFORM, ROOT, load_yaml, require_binary, run

COMPOSE = ROOT / "docker-compose.yml"
APP_SERVICES = ("web", "worker", "scheduler", "flower")
# What the app services may differ by: nothing but `command` (none publishes
# a port: nginx is the public entry).
APP_DIFFERENCES = {"command"}
# Issue 18: the one service published on every interface; the rest on loopback.
PUBLIC_SERVICE = "nginx"
STORES = {
    "postgres": "/var/lib/postgresql/data",
    "redis": "/data",
    "prometheus": "/prometheus",
    "alertmanager": "/alertmanager",
    "grafana": "/var/lib/grafana",
    "jaeger": "/badger",
    "flower": "/app/var/flower",
    "worker": "/app/var/outcomes",
}


@pytest.fixture(scope="module")
def compose() -> dict:
    return load_yaml(COMPOSE)


@pytest.mark.ops
@pytest.mark.timeout(120)
def test_debian_docker_compose_accepts_the_file() -> None:
    docker_compose = require_binary("docker-compose")
    # A clean checkout has no .env: the file must validate without one.
    result = run([docker_compose, "-f", str(COMPOSE), "config", "-q"], cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


def test_app_services_run_the_procfile_commands(compose: dict) -> None:
    procfile = procfile_commands()
    for name in APP_SERVICES:
        assert shlex.split(compose["services"][name]["command"]) == procfile[name], name


def test_app_services_share_one_definition_and_differ_only_by_command(compose: dict) -> None:
    anchor = compose["x-app"]
    for name in APP_SERVICES:
        service = compose["services"][name]
        differing = {k for k in set(service) | set(anchor) if service.get(k) != anchor.get(k)}
        assert differing <= APP_DIFFERENCES, f"{name} differs from x-app by {differing}"
    images = {compose["services"][name]["image"] for name in (*APP_SERVICES, "migrate")}
    assert images == {anchor["image"]}
    assert anchor["build"]["dockerfile"] == "platform/Dockerfile"


def test_app_services_start_after_migrations_and_healthy_stores(compose: dict) -> None:
    services = compose["services"]
    for name in APP_SERVICES:
        depends = services[name]["depends_on"]
        assert depends["migrate"] == {"condition": "service_completed_successfully"}, name
        assert depends["postgres"] == {"condition": "service_healthy"}, name
        assert depends["redis"] == {"condition": "service_healthy"}, name
    assert shlex.split(services["migrate"]["command"]) == [
        "python",
        "manage.py",
        "migrate",
        "--no-input",
    ]
    assert services["migrate"]["restart"] == "no"


def test_every_long_running_service_has_a_healthcheck(compose: dict) -> None:
    services = compose["services"]
    one_off = {name for name, s in services.items() if s.get("restart") == "no"}
    # One-off steps are gated by completion, not health.
    gated = {
        dependency
        for s in services.values()
        for dependency, condition in (s.get("depends_on") or {}).items()
        if condition == {"condition": "service_completed_successfully"}
    }
    assert one_off == gated, (one_off, gated)
    expected = {
        "web", "worker", "scheduler", "flower", "migrate", "postgres", "redis", "prometheus",
        "alertmanager", "grafana", "otel-collector", "jaeger", "jaeger-volume", "nginx",
    }  # fmt: skip
    assert expected <= set(services)
    for name, service in services.items():
        if name in one_off:
            continue
        check = service.get("healthcheck") or {}
        assert check.get("test"), f"{name}: no healthcheck"
        assert not check.get("disable"), f"{name}: healthcheck disabled"


def test_every_store_is_a_named_volume(compose: dict) -> None:
    declared = set(compose["volumes"])
    used = set()
    for name, path in STORES.items():
        mounts = [m.split(":") for m in compose["services"][name].get("volumes", [])]
        named = {source for source, target, *_ in mounts if target == path}
        assert named, f"{name}: nothing mounted on {path}"
        assert named <= declared, f"{name}: {path} is not on a named volume"
        used |= named
    assert used == declared, f"declared but unused volumes: {declared - used}"
    for service in compose["services"].values():
        for mount in service.get("volumes", []):
            source = mount.split(":")[0]
            if source.startswith("./"):
                assert (ROOT / source).exists(), mount
                assert mount.endswith(":ro"), f"configuration mounted writable: {mount}"


def test_app_environment_covers_every_variable_the_code_reads(compose: dict) -> None:
    environment = compose["x-app"]["environment"]
    missing = sorted(set(reads()) - set(environment))
    assert not missing, f"not passed to the app containers: {missing}"
    undocumented = sorted(set(environment) - set(env_example()))
    assert not undocumented, f"compose passes variables .env.example does not list: {undocumented}"
    assert environment["DJANGO_SETTINGS_MODULE"] == "config.settings.production"
    # Bound to all interfaces inside the container, or Prometheus cannot scrape them.
    for variable in ("JOBS_WORKER_METRICS_ADDR", "JOBS_SCHEDULER_METRICS_ADDR", "FLOWER_ADDRESS"):
        assert environment[variable] == "0.0.0.0", variable
    assert environment["WEB_BIND"] == "0.0.0.0:8000"


def test_prometheus_scrapes_the_compose_services_on_their_ports(compose: dict) -> None:
    config = load_yaml(PLATFORM / "prometheus" / "prometheus.yml")
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    targets = {
        (target, group.get("labels", {}).get("component"))
        for group in jobs["celery"]["static_configs"]
        for target in group["targets"]
    }
    assert targets == {
        ("web:8000", "web"),
        ("worker:9808", "worker"),
        ("scheduler:9809", "scheduler"),
    }
    assert jobs["flower"]["static_configs"][0]["targets"] == ["flower:5555"]
    # Flower serves under the prefix nginx routes (/flower/), its /metrics too
    assert compose["x-app"]["environment"]["FLOWER_URL_PREFIX"] == "flower"
    assert jobs["flower"]["metrics_path"] == "/flower/metrics"
    assert jobs["celery"]["metrics_path"] == "/metrics"
    assert config["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"] == [
        "alertmanager:9093"
    ]
    assert set(jobs) == {"celery", "flower"}
    for service in ("web", "worker", "scheduler", "flower", "alertmanager"):
        assert service in compose["services"]


def test_traces_flow_from_the_apps_through_the_collector_to_jaeger(compose: dict) -> None:
    collector = load_yaml(PLATFORM / "otel-collector.yaml")
    protocols = collector["receivers"]["otlp"]["protocols"]
    assert protocols["http"]["endpoint"].endswith(":4318")
    assert protocols["grpc"]["endpoint"].endswith(":4317")
    pipeline = collector["service"]["pipelines"]["traces"]
    assert pipeline["receivers"] == ["otlp"]
    (exporter,) = pipeline["exporters"]
    assert collector["exporters"][exporter]["endpoint"] == "jaeger:4317"
    assert "${OTEL_EXPORTER_OTLP_ENDPOINT:-http://otel-collector:4318}" in COMPOSE.read_text()
    assert compose["services"]["jaeger"]["environment"]["COLLECTOR_OTLP_ENABLED"] == "true"


# Short-syntax `ports` entry: [address:]host port (a number or ${VAR:-default}):container port.
PORT_ENTRY = re.compile(r"^(?:(?P<address>[0-9.]+):)?(?P<host>\$\{[^}]*\}|\d+):(?P<container>\d+)$")


def published(service: dict) -> list[tuple[str, str, str]]:
    """(host address or "", host port, container port) of each `ports` entry."""
    entries = []
    for entry in service.get("ports", []):
        match = PORT_ENTRY.match(str(entry))
        assert match, f"ports entry not in short syntax: {entry!r}"
        entries.append((match["address"] or "", match["host"], match["container"]))
    return entries


def test_only_the_proxy_is_public_and_everything_else_is_on_loopback(compose: dict) -> None:
    services = compose["services"]
    # given every published port of the stack
    for name, service in services.items():
        for address, _, _ in published(service):
            if name == PUBLIC_SERVICE:
                # then the proxy alone listens on every interface
                assert address == "", f"{name}: {address}"
            else:
                # and Prometheus, Alertmanager, Grafana and Jaeger only on loopback
                assert address == "127.0.0.1", f"{name} is published on {address or 'all'}"
    for name in APP_SERVICES:
        assert "ports" not in services[name], f"{name} publishes {services[name]['ports']}"
    assert published(services[PUBLIC_SERVICE]) == [("", "${JOBS_PUBLIC_PORT:-8000}", "8000")]
    loopback = {name for name, s in services.items() if published(s) and name != PUBLIC_SERVICE}
    assert loopback == {"prometheus", "alertmanager", "grafana", "jaeger"}


def test_the_proxy_renders_the_shipped_template_with_devstacks_defaults(
    compose: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy = compose["services"][PUBLIC_SERVICE]
    environment = proxy["environment"]
    # given the template the nginx image renders (envsubst of defined variables only)
    assert "./platform/nginx/templates:/etc/nginx/templates:ro" in proxy["volumes"]
    assert TEMPLATE.parent == PLATFORM / "nginx" / "templates"
    # then compose defines every placeholder, so none is left for nginx to refuse
    assert placeholders(TEMPLATE.read_text()) == set(environment)
    assert environment["NGINX_WEB_UPSTREAM"] == "web:8000"
    assert environment["NGINX_FLOWER_UPSTREAM"] == "flower:5555"
    assert environment["NGINX_LISTEN"] == "8000"
    # and the operator's limits default as `make up`'s do (devstack.nginx)
    for name in ("JOBS_MAX_REQUEST_BYTES", *limits_from_env()):
        monkeypatch.delenv(name, raising=False)
    defaults = {}
    for name, value in environment.items():
        match = re.fullmatch(r"\$\{(\w+):-([^}]*)\}", str(value))
        if match:
            defaults[name] = match[2]
    assert defaults == limits_from_env()
    # and the body limit is the API's own (one knob: JOBS_MAX_REQUEST_BYTES)
    assert environment["NGINX_CLIENT_MAX_BODY_SIZE"] == "${JOBS_MAX_REQUEST_BYTES:-262144}"
    # and the app trusts exactly that one proxy's X-Forwarded-For entry
    assert str(compose["x-app"]["environment"]["JOBS_TRUSTED_PROXY_COUNT"]) == "1"
