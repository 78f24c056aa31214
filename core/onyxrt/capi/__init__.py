"""``onyxrt.capi``: onnxruntime's ``onnxruntime.capi`` import paths, for code that reaches
into them::

    from onyxrt.capi import _pybind_state as C               # or, under onyxrt.compat,
    from onnxruntime.capi import _pybind_state as C          # the same module
    try:
        sess.run(None, feeds)
    except C.InvalidArgument:                                # catches onyxrt's errors
        ...

Submodules: ``onnxruntime_pybind11_state`` (every name, the exception classes among
them), ``_pybind_state`` (the same names), ``onnxruntime_inference_collection`` (the
Python classes), ``onnxruntime_validation``, ``build_and_package_info`` and
``_ld_preload`` (empty: nothing to preload). Importing this package is cheap; the
submodules import the runtime.
"""
