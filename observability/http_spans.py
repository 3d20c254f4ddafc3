"""Django server spans named by route template (OpenTelemetry's http.route), scrapes untraced."""

from __future__ import annotations

import re
from typing import Any

# Scrapes and health checks are not traced: they are most of the requests and
# say nothing about a job (regexes searched in the full URL, OTel's ExcludeList).
UNTRACED_URLS = "/metrics$,/healthz$"
_GROUP = re.compile(r"\(\?P<(?P<name>\w+)>")
_CONVERTER = re.compile(r"<(?:\w+:)?(?P<name>\w+)>")


def route_template(route: str) -> str:
    """Django's matched route as an OpenTelemetry `http.route` template.

    "api/jobs/(?P<pk>[0-9a-f-]+)/cancel/$" -> "/api/jobs/{pk}/cancel/", and
    "admin/jobs/job/<path:object_id>/change/" -> "/admin/jobs/job/{object_id}/change/":
    named groups and path converters become `{name}`, anchors and escapes go
    (semantic conventions, http.route: "the matched route, that is, the path
    template"; low cardinality, never the raw path).
    """
    out: list[str] = []
    i = 0
    while i < len(route):
        group = _GROUP.match(route, i)
        if group:
            depth, j = 1, group.end()
            while j < len(route) and depth:  # skip the group's pattern, nested parens included
                if route[j] == "\\":
                    j += 1
                elif route[j] == "(":
                    depth += 1
                elif route[j] == ")":
                    depth -= 1
                j += 1
            out.append("{" + group.group("name") + "}")
            i = j
            continue
        char = route[i]
        if char == "\\" and i + 1 < len(route):
            out.append(route[i + 1])
            i += 2
            continue
        if char not in "^$?":
            out.append(char)
        i += 1
    template = _CONVERTER.sub(lambda m: "{" + m.group("name") + "}", "".join(out))
    return "/" + template.lstrip("/")


def name_span_by_route(span: Any, request: Any, response: Any) -> None:
    """Django instrumentation response hook: span name "METHOD /route/{param}/" and http.route.

    The instrumentation names a span by the raw route regex; with DRF's
    routers that is an unreadable pattern. Unmatched paths keep the method
    alone as the name (a 404 must not add a span name per path).
    """
    match = getattr(request, "resolver_match", None)
    route = getattr(match, "route", None) if match is not None else None
    if not route or not span.is_recording():
        return
    template = route_template(route)
    span.set_attribute("http.route", template)
    span.update_name(f"{request.method} {template}")
