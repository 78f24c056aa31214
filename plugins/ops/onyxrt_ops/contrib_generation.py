"""(being written) com.microsoft operators: see docs/operators.md."""

from __future__ import annotations

# The operators are reached through ``library`` (this module registers them on import).
__all__: list[str] = []
