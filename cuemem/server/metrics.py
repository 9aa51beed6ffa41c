"""Prometheus text exposition for `GET /metrics` (issue 17): requests, latency histograms, errors, model calls.

A few dozen lines instead of a dependency: counters and histograms with labels, rendered in the text format
(https://prometheus.io/docs/instrumenting/exposition_formats/). Labels hold route templates and status codes,
never ids or text from requests, so the page leaks nothing of anyone's memory.
"""

from __future__ import annotations

import bisect
import threading
from collections import defaultdict
from collections.abc import Iterable

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
Labels = tuple[tuple[str, str], ...]


def _labels(labels: Labels) -> str:
    if not labels:
        return ""
    body = ",".join(f'{k}="{_escape(v)}"' for k, v in labels)
    return "{" + body + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class Registry:
    """Counters and histograms keyed by name and labels; `render()` gives the exposition text."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._help: dict[str, tuple[str, str]] = {}
        self._counters: dict[str, dict[Labels, float]] = defaultdict(dict)
        self._histograms: dict[str, dict[Labels, list[float]]] = defaultdict(dict)  # bucket counts, sum, count

    def describe(self, name: str, kind: str, text: str) -> None:
        self._help[name] = (kind, text)

    def inc(self, name: str, amount: float = 1.0, **labels: str) -> None:
        key = tuple(sorted(labels.items()))
        with self._lock:
            series = self._counters[name]
            series[key] = series.get(key, 0.0) + amount

    def observe(self, name: str, value: float, **labels: str) -> None:
        key = tuple(sorted(labels.items()))
        with self._lock:
            series = self._histograms[name].setdefault(key, [0.0] * (len(LATENCY_BUCKETS) + 2))
            index = bisect.bisect_left(LATENCY_BUCKETS, value)
            for i in range(index, len(LATENCY_BUCKETS)):
                series[i] += 1
            series[-2] += value
            series[-1] += 1

    def value(self, name: str, **labels: str) -> float:
        """A counter's current value (0 when never counted)."""
        with self._lock:
            return self._counters.get(name, {}).get(tuple(sorted(labels.items())), 0.0)

    def render(self, extra: Iterable[tuple[str, str, str, dict[str, str], float]] = ()) -> str:
        """The exposition text; `extra` adds gauges/counters read at scrape time: (name, kind, help, labels, value)."""
        lines: list[str] = []
        with self._lock:
            for name in sorted(self._counters):
                kind, text = self._help.get(name, ("counter", name))
                lines += [f"# HELP {name} {text}", f"# TYPE {name} {kind}"]
                for key, value in sorted(self._counters[name].items()):
                    lines.append(f"{name}{_labels(key)} {value:g}")
            for name in sorted(self._histograms):
                _, text = self._help.get(name, ("histogram", name))
                lines += [f"# HELP {name} {text}", f"# TYPE {name} histogram"]
                for key, series in sorted(self._histograms[name].items()):
                    for bound, count in zip(LATENCY_BUCKETS, series, strict=False):
                        lines.append(f"{name}_bucket{_labels((*key, ('le', f'{bound:g}')))} {count:g}")
                    lines.append(f"{name}_bucket{_labels((*key, ('le', '+Inf')))} {series[-1]:g}")
                    lines.append(f"{name}_sum{_labels(key)} {series[-2]:.6f}")
                    lines.append(f"{name}_count{_labels(key)} {series[-1]:g}")
        described: set[str] = set()
        for name, kind, text, labels, value in extra:
            if name not in described:
                lines += [f"# HELP {name} {text}", f"# TYPE {name} {kind}"]
                described.add(name)
            lines.append(f"{name}{_labels(tuple(sorted(labels.items())))} {value:g}")
        return "\n".join(lines) + "\n"
