"""GPU reductions: none of their own. ReduceSum, ReduceMean, ReduceMax, ReduceMin,
ReduceProd, ReduceSumSquare, ReduceL1, ReduceL2, ReduceLogSum, ReduceLogSumExp, ArgMax,
ArgMin and CumSum come from the operator library (:mod:`onyxrt_ops.reduction`), bound over
CuPy in ``kernels/__init__``: each is one CuPy reduction (``sum``, ``max``, ``argmax``,
``cumsum``...) with nothing to fuse, so no override is kept. Their axes inputs are host
inputs (read on the host; constant axes once per input rank).

TopK is not offered: the library does not define it (it needs a stable ``argsort``).
"""
