"""Integrations of onyxrt with other frameworks.

Each integration is a submodule that imports its framework lazily, so ``import onyxrt``
never needs it; install the matching extra to use one:

* :mod:`onyxrt.integrations.ray` — batch inference on Ray Data (``pip install onyxrt[ray]``).
"""

from __future__ import annotations
