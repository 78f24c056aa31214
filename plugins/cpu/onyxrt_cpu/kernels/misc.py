"""CPU kernels: misc (being written)."""

from __future__ import annotations
