"""(being filled) The reduction operators, written once over an array namespace."""

from __future__ import annotations

# The operators are reached through ``library`` (this module registers them on import).
__all__: list[str] = []
