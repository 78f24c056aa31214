"""CPU kernels: rnn (being written)."""

from __future__ import annotations
