"""onyxrt's operator library: each ONNX operator written once, against an array namespace.

A provider that computes with numpy, CuPy or any array-API library does not write its own
copy of every operator: it describes its array library as a
:class:`~onyxrt_ops.backend.Backend` (the namespace, the element types it holds, the few
functions beyond the standard it offers, such as ``erf``) and binds the library into its
kernel registry, after registering its own fast paths (compiled, fused) as overrides::

    from onyxrt_ops import library, numpy_backend

    backend = numpy_backend(extras={"erf": my_erf})

    @registry.register("Softmax", since=(1, 11, 13))
    class Softmax(library.kernel("Softmax", 13, backend)):
        def along(self, x, axis):
            y = compiled_softmax(x, axis)          # None when it does not apply
            return y if y is not None else super().along(x, axis)

    library.bind(backend, registry)                # every other operator

Importing the package imports every family module, which fills :data:`library`:

* :mod:`onyxrt_ops.activation` — activations and the softmax family;
* :mod:`onyxrt_ops.elementwise` — arithmetic, math functions, Max/Min/Sum/Mean, bitwise;
* :mod:`onyxrt_ops.logical` — comparisons, boolean logic and Where.
"""

from __future__ import annotations

# The family modules register their operators in ``library`` when imported.
from . import (  # noqa: F401
    activation,
    elementwise,
    indexing,
    linalg,
    logical,
    normalization,
    reduction,
    shape,
    spatial,
)
from .backend import Backend, namespace_backend, numpy_backend
from .library import OpKernel, OpLibrary, library

__all__ = ["Backend", "numpy_backend", "namespace_backend", "OpKernel", "OpLibrary", "library"]
