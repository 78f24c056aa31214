"""CPU overrides of the operator library's com.microsoft operators (:mod:`onyxrt_ops.contrib_quantization`):
none yet — the library's kernels, bound over numpy in ``kernels/__init__``, run them."""

from __future__ import annotations
