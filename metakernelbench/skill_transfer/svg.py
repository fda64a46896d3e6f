"""Small, dependency-free SVG charts for the HTML report.

The report must open from disk with no server and no script, so the charts are plain inline SVG
strings: a lift forest plot, a family heat map, standing bars and a per-problem strip. Ratios are
drawn on a log axis from 1/4 to 4 (the clip range of design.md §6), labelled as lift
(r − 1): a rescue sits at the right edge, a break at the left, no change in the middle.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

__all__ = [
    "FAMILY_COLOURS", "FONT", "HARM_COLOUR", "HELP_COLOUR", "TICKS", "heatmap", "lift_forest", "problem_strip",
    "standing_bars",
]

FAMILY_COLOURS = {
    "attention": "#4e79a7",
    "kv_cache": "#f28e2b",
    "linear_attention": "#59a14f",
    "mlp_norm": "#b07aa1",
    "moe": "#e15759",
    "quantization": "#76b7b2",
}
HELP_COLOUR = "#2b8a3e"
HARM_COLOUR = "#c92a2a"
FONT = 'font-family="system-ui, sans-serif" font-size="12"'
TICKS = (0.25, 0.5, 0.8, 1.0, 1.25, 2.0, 4.0)


def _x(r: float, left: float, width: float) -> float:
    """Position of ratio r on a log axis spanning [1/4, 4]."""
    r = min(4.0, max(0.25, r))
    return left + (math.log(r) / math.log(4) + 1) / 2 * width


def _lift_label(r: float) -> str:
    lift = (r - 1) * 100
    return "0" if abs(lift) < 1e-9 else f"{lift:+.0f}%"


def _svg(width: float, height: float, body: list[str], title: str) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" role="img" {FONT}>'
        f"<title>{escape(title)}</title>" + "".join(body) + "</svg>"
    )


def _axis(left: float, width: float, top: float, bottom: float) -> list[str]:
    out = []
    for t in TICKS:
        x = _x(t, left, width)
        dash = "" if t == 1.0 else ' stroke-dasharray="3,3"'
        out.append(f'<line x1="{x:.1f}" y1="{top:.1f}" x2="{x:.1f}" y2="{bottom:.1f}" stroke="#bbb"{dash}/>')
        out.append(f'<text x="{x:.1f}" y="{bottom + 14:.1f}" text-anchor="middle" fill="#555">'
                   f"{_lift_label(t)}</text>")
    return out


def lift_forest(rows: Sequence[tuple[str, float | None, tuple[float, float] | None, int]],
                title: str = "Paired lift with 95% bootstrap interval") -> str:
    """One line per (label, lift, interval, n): a dot at the lift and a bar over the interval."""
    label_w, plot_w, row_h, top = 260.0, 420.0, 26.0, 28.0
    height = top + row_h * max(1, len(rows)) + 30
    body = [f'<text x="4" y="16" font-weight="bold">{escape(title)}</text>']
    body += _axis(label_w, plot_w, top - 6, height - 26)
    for i, (label, lift, interval, n) in enumerate(rows):
        y = top + row_h * i + row_h / 2
        body.append(f'<text x="{label_w - 8:.0f}" y="{y + 4:.1f}" text-anchor="end">{escape(label)} (n={n})</text>')
        if lift is None:
            body.append(f'<text x="{label_w + 6:.0f}" y="{y + 4:.1f}" fill="#888">no comparisons</text>')
            continue
        if interval is not None:
            x0, x1 = (_x(1 + v, label_w, plot_w) for v in interval)
            body.append(f'<line x1="{x0:.1f}" y1="{y:.1f}" x2="{x1:.1f}" y2="{y:.1f}" stroke="#333" stroke-width="2"/>')
        colour = HELP_COLOUR if lift > 0 else HARM_COLOUR if lift < 0 else "#333"
        x = _x(1 + lift, label_w, plot_w)
        tip = f"{label}: lift {lift * 100:+.1f}%"
        if interval is not None:
            tip += f", 95% CI [{interval[0] * 100:+.1f}%, {interval[1] * 100:+.1f}%]"
        body.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="5" fill="{colour}"><title>{escape(tip)}</title></circle>')
    return _svg(label_w + plot_w + 30, height, body, title)


def _diverging(lift: float) -> str:
    """Green for help, red for harm, white for none; saturates at the clip range."""
    t = max(-1.0, min(1.0, math.log(1 + lift) / math.log(4)))
    base = (43, 138, 62) if t > 0 else (201, 42, 42)
    a = abs(t) ** 0.7
    r, g, b = (round(255 + (c - 255) * a) for c in base)
    return f"#{r:02x}{g:02x}{b:02x}"


def heatmap(row_labels: Sequence[str], col_labels: Sequence[str],
            values: dict[tuple[str, str], tuple[float | None, int]],
            title: str = "Paired lift by family") -> str:
    """Cells coloured by lift; each shows the lift and n (blank where there are no comparisons)."""
    label_w, cell_w, cell_h, top = 260.0, 96.0, 34.0, 56.0
    width = label_w + cell_w * len(col_labels) + 10
    height = top + cell_h * len(row_labels) + 10
    body = [f'<text x="4" y="16" font-weight="bold">{escape(title)}</text>']
    for j, col in enumerate(col_labels):
        x = label_w + cell_w * (j + 0.5)
        body.append(f'<text x="{x:.1f}" y="{top - 8:.1f}" text-anchor="middle">{escape(col)}</text>')
    for i, row in enumerate(row_labels):
        y = top + cell_h * i
        body.append(f'<text x="{label_w - 8:.0f}" y="{y + cell_h / 2 + 4:.1f}" text-anchor="end">{escape(row)}</text>')
        for j, col in enumerate(col_labels):
            x = label_w + cell_w * j
            lift, n = values.get((row, col), (None, 0))
            fill = "#f1f3f5" if lift is None else _diverging(lift)
            text = "–" if lift is None else f"{lift * 100:+.0f}%"
            body.append(f'<rect x="{x + 1:.1f}" y="{y + 1:.1f}" width="{cell_w - 2:.1f}" height="{cell_h - 2:.1f}" '
                        f'fill="{fill}" stroke="#fff"><title>{escape(f"{row} / {col}: {text}, n={n}")}</title></rect>')
            body.append(f'<text x="{x + cell_w / 2:.1f}" y="{y + cell_h / 2 + 4:.1f}" text-anchor="middle">'
                        f'{escape(text)} <tspan fill="#555" font-size="10">n={n}</tspan></text>')
    return _svg(width, height, body, title)


def standing_bars(groups: Sequence[tuple[str, dict[str, tuple[float | None, float | None, int]]]],
                  title: str = "Help and harm by source standing") -> str:
    """Per group (model and direction), help and harm rates for sources above/same/below the solo."""
    tiers = ("above", "same", "below")
    group_w, bar_w, plot_h, top = 230.0, 28.0, 150.0, 40.0
    width = 50 + group_w * max(1, len(groups))
    height = top + plot_h + 64
    base_y = top + plot_h
    body = [f'<text x="4" y="16" font-weight="bold">{escape(title)}</text>',
            f'<rect x="{width - 170:.0f}" y="6" width="10" height="10" fill="{HELP_COLOUR}"/>'
            f'<text x="{width - 156:.0f}" y="15">help</text>'
            f'<rect x="{width - 110:.0f}" y="6" width="10" height="10" fill="{HARM_COLOUR}"/>'
            f'<text x="{width - 96:.0f}" y="15">harm</text>']
    for frac in (0, 0.5, 1):
        y = base_y - plot_h * frac
        body.append(f'<line x1="40" y1="{y:.1f}" x2="{width - 10:.1f}" y2="{y:.1f}" stroke="#ddd"/>'
                    f'<text x="36" y="{y + 4:.1f}" text-anchor="end" fill="#555">{frac * 100:.0f}%</text>')
    for g, (label, data) in enumerate(groups):
        x0 = 50 + group_w * g
        for t, tier in enumerate(tiers):
            help_rate, harm_rate, n = data.get(tier, (None, None, 0))
            x = x0 + t * (2 * bar_w + 10)
            for k, (rate, colour, name) in enumerate(((help_rate, HELP_COLOUR, "help"),
                                                      (harm_rate, HARM_COLOUR, "harm"))):
                if rate is None:
                    continue
                h = plot_h * rate
                tip = f"{label}, source {tier}: {name} {rate * 100:.0f}% of {n}"
                body.append(f'<rect x="{x + k * bar_w:.1f}" y="{base_y - h:.1f}" width="{bar_w - 2:.1f}" '
                            f'height="{h:.1f}" fill="{colour}"><title>{escape(tip)}</title></rect>')
            body.append(f'<text x="{x + bar_w:.1f}" y="{base_y + 14:.1f}" text-anchor="middle">{tier}</text>'
                        f'<text x="{x + bar_w:.1f}" y="{base_y + 27:.1f}" text-anchor="middle" fill="#555" '
                        f'font-size="10">n={n}</text>')
        centre = x0 + (len(tiers) * (2 * bar_w + 10) - 10) / 2
        body.append(f'<text x="{centre:.1f}" y="{base_y + 46:.1f}" text-anchor="middle" '
                    f'font-weight="bold">{escape(label)}</text>')
    return _svg(width, height, body, title)


def problem_strip(rows: Sequence[tuple[str, Sequence[tuple[str, float, str]]]],
                  title: str = "Per-problem ratio (transfer vs solo)") -> str:
    """One strip per group: a dot per problem at its ratio, coloured by family, jittered apart."""
    label_w, plot_w, row_h, top = 260.0, 420.0, 56.0, 28.0
    height = top + row_h * max(1, len(rows)) + 56
    body = [f'<text x="4" y="16" font-weight="bold">{escape(title)}</text>']
    body += _axis(label_w, plot_w, top - 6, top + row_h * max(1, len(rows)))
    for i, (label, points) in enumerate(rows):
        y_mid = top + row_h * i + row_h / 2
        body.append(f'<text x="{label_w - 8:.0f}" y="{y_mid + 4:.1f}" text-anchor="end">{escape(label)}</text>')
        # Dots closer than 6 px share a bucket and are spread vertically, alternating up and down,
        # with a step that keeps the fullest bucket inside the row.
        buckets = [round(_x(r, label_w, plot_w) / 6) for _p, r, _f in points]
        fullest = max((buckets.count(b) for b in set(buckets)), default=1)
        step = min(5.0, (row_h / 2 - 4) / max(1, fullest // 2))
        seen: dict[int, int] = {}
        for (problem, r, family), bucket in zip(points, buckets, strict=True):
            x = _x(r, label_w, plot_w)
            k = seen.get(bucket, 0)
            seen[bucket] = k + 1
            y = y_mid + ((k + 1) // 2) * step * (1 if k % 2 else -1)
            colour = FAMILY_COLOURS.get(family, "#555")
            tip = f"{problem} ({family}): r = {r:.3g}, lift {(r - 1) * 100:+.0f}%"
            body.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3.5" fill="{colour}" fill-opacity="0.85">'
                        f"<title>{escape(tip)}</title></circle>")
    legend_y = top + row_h * max(1, len(rows)) + 36
    for j, (family, colour) in enumerate(FAMILY_COLOURS.items()):
        x = 10 + j * 132
        body.append(f'<circle cx="{x:.0f}" cy="{legend_y - 4:.0f}" r="4" fill="{colour}"/>'
                    f'<text x="{x + 8:.0f}" y="{legend_y:.0f}">{family}</text>')
    return _svg(max(label_w + plot_w + 30, 10 + 132 * len(FAMILY_COLOURS)), height, body, title)
