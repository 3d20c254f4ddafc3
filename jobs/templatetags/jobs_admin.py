"""Template tags of the jobs admin pages."""

from __future__ import annotations

import datetime
from typing import Any

from django import template
from django.db import models
from django.utils import timezone
from django.utils.text import capfirst
from django.utils.translation import gettext as _

register = template.Library()


@register.inclusion_tag("admin/date_hierarchy.html")
def jobs_date_hierarchy(cl: Any) -> dict[str, Any]:
    """Django's date hierarchy with one MIN/MAX query at most (an index lookup).

    Django's own tag lists the years, months or days that hold rows with
    SELECT DISTINCT date_trunc(...) over every matching row: a scan of the
    whole table on the first page. This one offers every period between the
    first and the last row instead (a period may turn out empty).
    """
    field_name = cl.date_hierarchy
    year_field, month_field, day_field = (f"{field_name}__{p}" for p in ("year", "month", "day"))
    year, month, day = (cl.params.get(f) for f in (year_field, month_field, day_field))
    year, month, day = (
        int(v[-1] if isinstance(v, list) else v) if v else None for v in (year, month, day)
    )

    def link(filters: dict[str, Any]) -> str:
        return cl.get_query_string(filters, [f"{field_name}__"])

    if year and month and day:
        date = datetime.date(year, month, day)
        return {
            "show": True,
            "back": {
                "link": link({year_field: year, month_field: month}),
                "title": date.strftime("%B %Y"),
            },
            "choices": [{"title": date.strftime("%B %-d")}],
        }
    bounds = cl.queryset.aggregate(first=models.Min(field_name), last=models.Max(field_name))
    first, last = bounds["first"], bounds["last"]
    if first is None or last is None:
        return {"show": False}
    first, last = timezone.localtime(first), timezone.localtime(last)
    if not year and first.year == last.year:
        year = first.year
        if first.month == last.month:
            month = first.month
    if year and month:
        days = range(first.day if (first.year, first.month) == (year, month) else 1, 32)
        choices = []
        for d in days:
            try:
                date = datetime.date(year, month, d)
            except ValueError:
                break
            if (year, month) == (last.year, last.month) and d > last.day:
                break
            choices.append(
                {
                    "link": link({year_field: year, month_field: month, day_field: d}),
                    "title": date.strftime("%B %-d"),
                }
            )
        return {
            "show": True,
            "back": {"link": link({year_field: year}), "title": str(year)},
            "choices": choices,
        }
    if year:
        lo = first.month if first.year == year else 1
        hi = last.month if last.year == year else 12
        return {
            "show": True,
            "back": {"link": link({}), "title": _("All dates")},
            "choices": [
                {
                    "link": link({year_field: year, month_field: m}),
                    "title": capfirst(datetime.date(year, m, 1).strftime("%B %Y")),
                }
                for m in range(lo, hi + 1)
            ],
        }
    return {
        "show": True,
        "back": None,
        "choices": [
            {"link": link({year_field: str(y)}), "title": str(y)}
            for y in range(first.year, last.year + 1)
        ],
    }
