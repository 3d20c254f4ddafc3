"""Metric names a PromQL expression selects, without a PromQL parser.

Enough of PromQL's lexical structure to tell a metric name from a function,
an aggregation, a keyword, a label name or a duration: strings, label
matchers `{...}`, ranges `[...]` and label lists (`by (...)`, `on (...)`,
...) are removed first; what is left that looks like an identifier and is
not followed by `(` nor a keyword is a metric name. Grafana's variables
(`$job`, `$__rate_interval`) only appear inside the removed parts.
"""

from __future__ import annotations

import re

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGE = re.compile(r"\[[^\[\]]*\]")
_LABEL_LIST = re.compile(
    r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)", re.IGNORECASE
)
_BARE_GROUPING = re.compile(r"\b(group_left|group_right)\b", re.IGNORECASE)
_IDENTIFIER = re.compile(r"(?<![\w:.$])[a-zA-Z_:][\w:]*")
KEYWORDS = {
    "and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring",
    "group_left", "group_right", "inf", "nan", "atan2", "start", "end",
}  # fmt: skip


def metric_names(expr: str) -> set[str]:
    """Names of the series `expr` reads (recording rule names included).

    >>> sorted(metric_names('sum by (kind) (rate(jobs_retries_total{job=~"$job"}[5m])) > 0'))
    ['jobs_retries_total']
    """
    text = _STRING.sub('""', expr)
    text = _MATCHERS.sub("", text)
    text = _RANGE.sub("", text)
    text = _LABEL_LIST.sub(" ", text)
    text = _BARE_GROUPING.sub(" ", text)
    names = set()
    for match in _IDENTIFIER.finditer(text):
        rest = text[match.end() :].lstrip()
        if rest.startswith("(") or match.group().lower() in KEYWORDS:
            continue
        names.add(match.group())
    return names
