"""CPU kernels: text (being written)."""

from __future__ import annotations
