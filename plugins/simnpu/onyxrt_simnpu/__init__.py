"""onyxrt-simnpu: a simulated NPU, the worked example of a compile-style provider.

Real NPUs (TensorRT, OpenVINO, QNN, CoreML) claim whole connected subgraphs, compile each
into one program and keep tensors in memory the host cannot read. This package does the
same over numpy, module by module:

* ``plugin.py``     — the entry point: declares the provider to onyxrt's core.
* ``provider.py``   — ``SimNPUExecutionProvider``: options, device, the protocol methods.
* ``capability.py`` — which nodes the NPU takes: per-op checks, maximal groups, memory.
* ``ops.py``        — the NPU's op set: constraints, numerics per precision, costs.
* ``compiler.py``   — a fused group → a :class:`~onyxrt_simnpu.program.Program`.
* ``program.py``    — the compiled schedule, its cost model and its safe serialization.
* ``cache.py``      — compiled programs on disk, keyed by content and options.
* ``memory.py``     — device memory: opaque tensors, the arena, host transfers.
"""

from __future__ import annotations

__version__ = "0.1.0"
