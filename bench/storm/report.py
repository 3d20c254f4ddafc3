"""The drill's verdict, its side-by-side table and its PNG (matplotlib, Agg backend)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .model import MB, SideResult, StormConfig

LABELS = {"platform": "platform", "stock": "stock Celery"}


@dataclass(frozen=True)
class Verdict:
    """Whether the platform held: RSS growth at its peak within the bound, no thread left, 0 lost."""

    ok: bool
    lines: list[str]


def judge(results: list[SideResult], config: StormConfig) -> Verdict:
    """One line per side; `ok` is false when the platform lost a job, grew past the bound or left threads."""
    ok = True
    lines = []
    for r in results:
        left = r.end_threads - r.baseline_threads
        line = (
            f"{LABELS[r.name]}: RSS growth {r.growth_peak / MB:.1f} MB at peak, "
            f"{r.growth_end / MB:.1f} MB at the end; threads {r.baseline_threads} -> "
            f"{r.peak_threads} (peak) -> {r.end_threads} (end); {r.lost} lost, "
            f"{r.unsettled} unsettled of {r.submitted}"
        )
        if r.name == "platform":
            failures = []
            if r.growth_peak > config.max_growth_bytes:
                failures.append(f"grew past {config.max_growth_bytes / MB:g} MB")
            if left > 0:
                failures.append(f"left {left} threads behind")
            if r.lost:
                failures.append(f"lost {r.lost} jobs")
            ok = ok and not failures
            line += (
                f": FAILED ({', '.join(failures)})"
                if failures
                else f": held (bound {config.max_growth_bytes / MB:g} MB, threads flat, 0 lost)"
            )
        lines.append(line)
    return Verdict(ok=ok, lines=lines)


def table(results: list[SideResult]) -> str:
    """A plain-text table, one column per side."""

    def mb(value: int) -> str:
        return f"{value / MB:.1f}"

    rows: list[tuple[str, ...]] = [("", *(LABELS[r.name] for r in results))]

    def row(label: str, values: list[object]) -> None:
        rows.append((label, *(str(v) for v in values)))

    row("jobs submitted", [r.submitted for r in results])
    row("succeeded", [r.end.succeeded for r in results])
    row("dead / failed", [r.end.failed for r in results])
    row("unsettled at the end", [r.unsettled for r in results])
    row("lost", [r.lost for r in results])
    row("attempts", [r.end.attempts for r in results])
    row("storm to settled (s)", [f"{r.storm_seconds:.1f}" for r in results])
    row("worker RSS before (MB)", [mb(r.baseline_rss) for r in results])
    row("worker RSS peak (MB)", [mb(r.peak_rss) for r in results])
    row("RSS growth at peak (MB)", [mb(r.growth_peak) for r in results])
    row("RSS growth at the end (MB)", [mb(r.growth_end) for r in results])
    row(
        "threads before / peak / end",
        [f"{r.baseline_threads} / {r.peak_threads} / {r.end_threads}" for r in results],
    )
    row("peak attempts in flight", [r.peak_in_flight for r in results])
    row("peak retries pending", [r.peak_pending_retries for r in results])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    rule = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
    lines = [rule]
    for index, cells in enumerate(rows):
        padded = [
            cells[0].ljust(widths[0]),
            *(c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True)),
        ]
        lines.append("| " + " | ".join(padded) + " |")
        if index == 0:
            lines.append(rule)
    lines.append(rule)
    return "\n".join(lines)


def plot(results: list[SideResult], config: StormConfig, path: Path) -> Path:
    """Write RSS growth, attempts in flight (and retries pending) and threads over time to `path` (PNG)."""
    import matplotlib  # noqa: PLC0415 - optional dependency (the drill extra), only for the plot

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415 - optional dependency (the drill extra), only for the plot

    colours = {"platform": "tab:blue", "stock": "tab:red"}
    fig, (rss_ax, flight_ax, thread_ax) = plt.subplots(3, 1, figsize=(10, 9), sharex=True)
    for r in results:
        t = [s.t for s in r.samples]
        colour, label = colours[r.name], LABELS[r.name]
        rss_ax.plot(
            t, [(s.rss_bytes - r.baseline_rss) / MB for s in r.samples], color=colour, label=label
        )
        flight_ax.plot(
            t, [s.counts.in_flight for s in r.samples], color=colour, label=f"{label}: in flight"
        )
        flight_ax.plot(
            t,
            [s.counts.pending_retries for s in r.samples],
            color=colour,
            linestyle="--",
            label=f"{label}: retries pending",
        )
        thread_ax.plot(t, [s.threads for s in r.samples], color=colour, label=label)
    rss_ax.axhline(
        config.max_growth_bytes / MB, color="grey", linestyle=":", label="platform bound"
    )
    rss_ax.set_ylabel("worker RSS growth (MB)\nmain + children")
    flight_ax.set_ylabel("attempts")
    thread_ax.set_ylabel("worker threads\nmain + children")
    thread_ax.set_xlabel("seconds since the storm was sent")
    for ax in (rss_ax, flight_ax, thread_ax):
        ax.grid(alpha=0.3)
        ax.legend(loc="best", fontsize=8)
    fig.suptitle(
        f"jobs_storm: {config.jobs} jobs, first {config.fail_times} attempts time out "
        f"({config.timeout:g} s), {config.buffer_bytes / MB:.1f} MB each"
        f"{', a helper thread each' if config.leave_thread else ''}; {config.concurrency} children"
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
