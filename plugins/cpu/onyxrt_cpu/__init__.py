"""onyxrt-cpu: the CPU execution provider (numpy kernels).

Registered with the core through the ``onyxrt.providers`` entry point, exactly as a
third-party provider would be (see ``plugin.py``).
"""

from __future__ import annotations

__version__ = "0.1.0"
