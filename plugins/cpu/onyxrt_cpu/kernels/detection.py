"""CPU kernels: detection (being written)."""

from __future__ import annotations
