"""Charts of the admin overview, drawn on the server as inline SVG.

No JavaScript and no CDN: the page works offline and behind any CSP, and
a chart is plain markup a test can count bars in. Every function returns
safe HTML of one <svg class="jobs-chart" data-chart="NAME" role="img">.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

FIRST_COLOUR = "#1f6fb2"
RETRY_COLOUR = "#e07b00"
BAR_COLOUR = "#5a6b7b"
OVER_COLOUR = "#c62828"
LIMIT_COLOUR = "#c62828"


def _svg(name: str, title: str, width: int, height: int, body: list[str]) -> SafeString:
    return mark_safe(  # noqa: S308 - every text inside was escaped
        f'<svg class="jobs-chart" data-chart="{escape(name)}" role="img" '
        f'width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        # Scales down to its card's width, keeping its proportions.
        f'style="max-width:100%;height:auto" '
        f'xmlns="http://www.w3.org/2000/svg"><title>{escape(title)}</title>{"".join(body)}</svg>'
    )


def stacked_columns(
    name: str,
    title: str,
    first: Sequence[int],
    retries: Sequence[int],
    *,
    start_label: str,
    end_label: str,
    width: int = 440,
    height: int = 90,
) -> SafeString:
    """Columns per bucket: first attempts (blue) with retries (orange) stacked on top.

    The y axis runs from 0 to the busiest bucket, labelled with its total.
    """
    top, bottom, left = 12, 16, 4
    plot_h = height - top - bottom
    n = max(1, len(first))
    peak = max([f + r for f, r in zip(first, retries, strict=True)] or [0]) or 1
    slot = (width - left) / n
    body = [
        f'<text x="{left}" y="10" font-size="10" fill="#444">max {peak}/bucket</text>',
        f'<line x1="{left}" y1="{top + plot_h}" x2="{width}" y2="{top + plot_h}" stroke="#999"/>',
    ]
    for i, (f, r) in enumerate(zip(first, retries, strict=True)):
        x = left + i * slot + 1
        w = max(1.0, slot - 2)
        fh = plot_h * f / peak
        rh = plot_h * r / peak
        if f:
            body.append(
                f'<rect class="bar first" x="{x:.1f}" y="{top + plot_h - fh:.1f}" width="{w:.1f}" '
                f'height="{fh:.1f}" fill="{FIRST_COLOUR}"><title>{f} first</title></rect>'
            )
        if r:
            body.append(
                f'<rect class="bar retry" x="{x:.1f}" y="{top + plot_h - fh - rh:.1f}" '
                f'width="{w:.1f}" height="{rh:.1f}" fill="{RETRY_COLOUR}">'
                f"<title>{r} retries</title></rect>"
            )
    body.append(
        f'<text x="{left}" y="{height - 3}" font-size="10" fill="#444">{escape(start_label)}</text>'
    )
    body.append(
        f'<text x="{width - 2}" y="{height - 3}" font-size="10" fill="#444" '
        f'text-anchor="end">{escape(end_label)}</text>'
    )
    return _svg(name, title, width, height, body)


def horizontal_bars(
    name: str,
    title: str,
    items: Sequence[tuple[str, float, float | None]],
    *,
    fmt: Callable[[float], str] = lambda v: f"{v:g}",
    width: int = 560,
    bar_height: int = 16,
    label_width: int = 230,
) -> SafeString:
    """One bar per (label, value, limit); a red tick marks each limit, over-limit bars are red.

    The scale runs to the largest value or limit.
    """
    if not items:
        return _svg(name, title, width, 24, ['<text x="4" y="16" font-size="11">no data</text>'])
    gap = 4
    height = len(items) * (bar_height + gap) + gap
    scale_max = max(max(v, lim or 0) for _, v, lim in items) or 1
    plot_w = width - label_width - 80
    body = []
    for i, (label, value, limit) in enumerate(items):
        y = gap + i * (bar_height + gap)
        w = plot_w * value / scale_max
        over = limit is not None and limit > 0 and value > limit
        colour = OVER_COLOUR if over else BAR_COLOUR
        body.append(
            f'<text x="{label_width - 6}" y="{y + bar_height - 4}" font-size="11" '
            f'text-anchor="end">{escape(label)}</text>'
        )
        body.append(
            f'<rect class="bar" data-label="{escape(label)}" data-value="{value:g}" '
            f'x="{label_width}" y="{y}" width="{max(1.0, w):.1f}" '
            f'height="{bar_height}" fill="{colour}"><title>{escape(fmt(value))}</title></rect>'
        )
        body.append(
            f'<text x="{label_width + max(1.0, w) + 4:.1f}" y="{y + bar_height - 4}" '
            f'font-size="11">{escape(fmt(value))}</text>'
        )
        if limit:
            lx = label_width + plot_w * limit / scale_max
            body.append(
                f'<line class="limit" x1="{lx:.1f}" y1="{y - 1}" x2="{lx:.1f}" '
                f'y2="{y + bar_height + 1}" stroke="{LIMIT_COLOUR}" stroke-width="2">'
                f"<title>limit {escape(fmt(limit))}</title></line>"
            )
    return _svg(name, title, width, height, body)
