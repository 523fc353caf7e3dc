"""Small helpers for hand-written SVG: escaping, number formatting, axes."""

from __future__ import annotations

import html
import json
import math
from typing import Any, Iterable


def esc(value: Any) -> str:
    """Text or attribute content from data, escaped (quotes too)."""
    return html.escape(str(value), quote=True)


def num(value: float) -> str:
    """A coordinate: one decimal, no trailing zeros."""
    text = f"{value:.1f}"
    if text.endswith(".0"):
        text = text[:-2]
    return "0" if text == "-0" else text


#: Advance widths (em) of DejaVu Sans, the font Debian's Chromium draws the
#: charts in, for the characters labels are made of; others count as
#: ``_WIDE_EM``. Labels are drawn with ``textLength`` set to the estimate,
#: so whatever font the browser picks fits the text to exactly the width
#: the layout planned for it; the table only keeps that adjustment small.
_CHAR_EM = {
    **dict.fromkeys("0123456789", 0.636), **dict.fromkeys("il.,:;'|!", 0.29), **dict.fromkeys("jf", 0.32),
    " ": 0.318, "-": 0.361, "r": 0.411, "t": 0.392, "s": 0.521, "z": 0.525, "c": 0.55, "k": 0.579,
    "v": 0.592, "x": 0.592, "y": 0.592, "a": 0.613, "e": 0.615, "o": 0.612, "w": 0.818, "m": 0.974,
    "(": 0.39, ")": 0.39, "#": 0.838, "→": 0.838, "…": 1.0, "+": 0.838, "_": 0.5, "/": 0.337,
}  # fmt: skip
_LOWER_EM = 0.634  # b d g h n p q u
_UPPER_EM = 0.70
_WIDE_EM = 1.0
#: Bold (600 and 700) DejaVu Sans is this much wider.
_BOLD = 1.12


def text_width_px(text: str, size: float = 11, *, bold: bool = True) -> float:
    """The width a label of ``text`` at ``size`` px is drawn at."""
    em = 0.0
    for char in text:
        if char in _CHAR_EM:
            em += _CHAR_EM[char]
        elif char.isascii() and char.islower():
            em += _LOWER_EM
        elif char.isascii() and char.isupper():
            em += _UPPER_EM
        else:
            em += _WIDE_EM
    return em * size * (_BOLD if bold else 1.0)


def label_text(text: str, x: float, y: float, css: str | None = None, *, size: float = 11, bold: bool = True, attrs: str = "") -> str:
    """An SVG ``<text>`` of exactly :func:`text_width_px` (its
    ``textLength``), starting at ``x`` with its baseline at ``y``."""
    css_attr = f" class=\"{css}\"" if css else ""
    return (
        f"<text{css_attr} x=\"{num(x)}\" y=\"{num(y)}\" textLength=\"{num(text_width_px(text, size, bold=bold))}\"{attrs}>"
        f"{esc(text)}</text>"
    )


def overlaps(a: tuple[float, float, float, float], b: tuple[float, float, float, float], gap: float = 0.0) -> bool:
    """Whether boxes ``(left, top, right, bottom)`` come within ``gap`` of
    each other."""
    return a[0] < b[2] + gap and b[0] < a[2] + gap and a[1] < b[3] + gap and b[1] < a[3] + gap


def compact_json(value: Any, limit: int | None = None) -> str:
    text = json.dumps(value, sort_keys=False, separators=(",", ":"), default=str, ensure_ascii=False)
    if limit is not None and len(text) > limit:
        text = text[: max(0, limit - 1)] + "…"
    return text


def script_json(value: Any) -> str:
    """JSON safe inside ``<script type="application/json">``: no ``<``,
    ``>`` or ``&`` survive, so data cannot close the element."""
    try:
        text = json.dumps(value, separators=(",", ":"), default=str, ensure_ascii=False, allow_nan=False)
    except ValueError:  # NaN or infinity somewhere: JSON.parse would reject the block
        text = json.dumps(_finite(value), separators=(",", ":"), default=str, ensure_ascii=False)
    return (
        text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")
        .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
    )


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def seconds(ns: int | float | None, digits: int = 3) -> str:
    if ns is None:
        return "–"
    return f"{ns / 1e9:.{digits}f}"


def duration_text(ns: int | float) -> str:
    s = ns / 1e9
    if s < 120:
        return f"{s:.1f} s"
    return f"{int(s // 60)} min {s % 60:.0f} s"


def latency_text(ms: float | None) -> str:
    if ms is None:
        return "–"
    if ms < 1:
        return f"{ms * 1000:.0f} µs"
    if ms < 1000:
        return f"{ms:.1f} ms" if ms < 100 else f"{ms:.0f} ms"
    return f"{ms / 1000:.2f} s"


def nice_step(span: float, target: int) -> float:
    """A 1/2/5 x 10^k step giving about ``target`` intervals over ``span``."""
    if span <= 0:
        return 1.0
    raw = span / max(1, target)
    power = 10 ** math.floor(math.log10(raw))
    for multiple in (1, 2, 5, 10):
        if raw <= multiple * power:
            return multiple * power
    return 10 * power


def linear_ticks(lo: float, hi: float, target: int) -> list[float]:
    step = nice_step(hi - lo, target)
    first = math.ceil(lo / step - 1e-9) * step
    ticks = []
    value = first
    while value <= hi + step * 1e-9:
        ticks.append(round(value, 10))
        value += step
    return ticks


def tick_label(value: float) -> str:
    if value == int(value):
        return str(int(value))
    return f"{value:g}"


class TimeScale:
    """Nanoseconds since the run began to x pixels; every chart shares one."""

    def __init__(self, end_ns: int, left: float, width: float) -> None:
        self.end_ns = max(1, end_ns)
        self.left = left
        self.width = width

    def x(self, ns: int | float) -> float:
        return self.left + min(max(ns, 0), self.end_ns) / self.end_ns * self.width

    @property
    def right(self) -> float:
        return self.left + self.width

    def ticks(self) -> list[float]:
        """Tick positions in seconds."""
        return linear_ticks(0, self.end_ns / 1e9, max(4, int(self.width // 90)))


class LogScale:
    """Milliseconds on a log axis, from decade to decade."""

    def __init__(self, values: Iterable[float], top: float, height: float) -> None:
        positive = [v for v in values if v > 0]
        lo = min(positive) if positive else 0.1
        hi = max(positive) if positive else 1000.0
        self.lo_exp = math.floor(math.log10(max(lo, 1e-3)))
        self.hi_exp = max(self.lo_exp + 1, math.ceil(math.log10(max(hi, 1e-3))))
        self.top = top
        self.height = height

    def y(self, ms: float) -> float:
        exp = math.log10(max(ms, 10.0 ** self.lo_exp))
        share = (exp - self.lo_exp) / (self.hi_exp - self.lo_exp)
        return self.top + self.height - min(max(share, 0.0), 1.0) * self.height

    def decades(self) -> list[float]:
        return [10.0 ** e for e in range(self.lo_exp, self.hi_exp + 1)]

    def minor(self) -> list[float]:
        return [m * 10.0 ** e for e in range(self.lo_exp, self.hi_exp) for m in (2, 5)]


def ms_label(ms: float) -> str:
    if ms >= 1000:
        return f"{ms / 1000:g} s"
    if ms >= 1:
        return f"{ms:g} ms"
    return f"{ms * 1000:g} µs"
