"""GPU reductions: none of their own. ReduceSum, ReduceMean, ReduceMax, ReduceMin,
ReduceProd, ReduceSumSquare, ReduceL1, ReduceL2, ReduceLogSum, ReduceLogSumExp, ArgMax,
ArgMin and CumSum come from the operator library (:mod:`onyxrt_ops.reduction`), bound over
CuPy in ``kernels/__init__``: each is one CuPy reduction (``sum``, ``max``, ``argmax``,
``cumsum``...) with nothing to fuse, so no override is kept. Their axes inputs are host
inputs (read on the host; constant axes once per input rank).

CumProd and TopK also come from the library (TopK's ``argsort`` relies on CuPy's sort
being stable, so ties keep the lower index first).
"""
