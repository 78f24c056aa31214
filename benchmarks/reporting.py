"""What the benchmark scripts share to read arguments and print results, with no runtime
imported: families.py's child processes import it before timing their runtime's import."""

from __future__ import annotations

import argparse
import math
import statistics
from collections.abc import Iterable


def positive(text: str) -> int:
    """Parse a count that must be at least 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive integer")
    return value


def geomean(values: Iterable[float]) -> float:
    """The geometric mean of positive ``values`` (ratios)."""
    return math.exp(statistics.fmean(math.log(v) for v in values))


def format_table(headers: list[str], rows: list[list[str]], markdown: bool) -> str:
    """A Markdown table, or plain text with the first column left-aligned."""
    if markdown:
        lines = [headers, ["---"] * len(headers), *rows]
        return "\n".join("| " + " | ".join(line) + " |" for line in lines)
    widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]
    return "\n".join(
        "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
        for r in [headers, *rows]
    )
