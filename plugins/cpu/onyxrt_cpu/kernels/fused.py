"""CPU kernels for the optimizer's fused operators (domain ``ai.onyxrt``, version 1).

* ``FusedConv(X, W, B?, Z?)``: Conv's attributes plus ``activation`` (Relu, Sigmoid, Tanh,
  LeakyRelu, HardSigmoid, Clip or "") and ``activation_params``; computes
  ``act(conv(X, W) + B + Z)`` with the bias, residual and activation applied in place on
  the convolution's fresh output buffer.
* ``FusedMatMul(A, B, bias?)``: ``alpha * A' @ B' + bias`` with ``transA``/``transB``
  swapping the last two axes; a batched A times a 2-D B runs as one GEMM.
* ``FusedGemm(A, B, C?)``: Gemm's attributes plus FusedConv's ``activation`` /
  ``activation_params``, the activation applied in place on the product.
* ``FusedElementwise(inputs...)``: a group of float32 elementwise operators (``ops``,
  ``args``) in one compiled pass.
* ``Gelu`` and ``LayerNormalization``: the standard kernels, registered in the fused
  domain for models whose opset predates them.

See ``onyxrt.optimizer`` for the patterns that produce them.
"""

from __future__ import annotations

import numpy as np

from onyxrt.errors import InvalidGraph
from onyxrt.kernels import Kernel, KernelInfo
from onyxrt.optimizer import FUSED_DOMAIN, FUSED_DOMAIN_VERSION
from onyxrt.optimizer.fused_ops import MatMulAttributes, activation, conv_epilogue

from .. import native
from . import registry
from ._spatial import compute_dtype
from .activation import Gelu, _fast_sigmoid
from .conv import Conv, add_channel_bias
from .linalg import Gemm, contiguous_transpose, is_row_vector, matmul, packed_product
from .normalization import LayerNormalization

__all__ = ["FusedConv", "FusedMatMul", "FusedGemm", "FusedElementwise", "GROUP_OPS", "native_activation"]

@registry.register("FusedConv", since=FUSED_DOMAIN_VERSION, domain=FUSED_DOMAIN)
class FusedConv(Conv):
    """Conv + bias + optional residual Z + optional activation, in place on one buffer."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.epilogue = conv_epilogue(info)
        self.native_act = native_activation(
            info.attr("activation", "") or "", info.attr("activation_params", []) or []
        )

    def compute(self, x, w, b=None, z=None):
        finish = None
        if self.native_act is not None:
            finish = (
                None if b is None else b.astype(np.float32, copy=False),
                None if z is None else z.astype(np.float32, copy=False),
                *self.native_act,
            )
        # The convolution applies bias, residual and activation in one compiled pass when
        # it can (float32, the compiled kernels on, an activation they know); if not, the
        # numpy epilogue computes the same values.
        y, finished = self._convolve(x, w, finish)
        if not finished:
            if b is not None:
                add_channel_bias(y, b)
            self.epilogue(np, y, z)
        return (y.astype(x.dtype, copy=False),)


def native_activation(name: str, params: list[float]) -> tuple[int, float, float] | None:
    """The compiled epilogue's (code, p0, p1) for this activation, or None when it has
    none (the numpy epilogue then runs)."""
    params = [float(p) for p in params]
    if name == "":
        return (native.ACT_NONE, 0.0, 0.0)
    if name == "Relu" and not params:
        return (native.ACT_RELU, 0.0, 0.0)
    if name == "Clip" and len(params) == 2:
        return (native.ACT_CLIP, params[0], params[1])
    if name == "LeakyRelu" and len(params) == 1:
        return (native.ACT_LEAKY, params[0], 0.0)
    return None


@registry.register("FusedMatMul", since=FUSED_DOMAIN_VERSION, domain=FUSED_DOMAIN)
class FusedMatMul(Kernel):
    """Y = alpha * A' @ B' + bias; A'/B' swap their last two axes when transA/transB."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.attrs = MatMulAttributes.of(info)
        # A constant 2-D B used transposed (a tied embedding as GPT-2's LM head, a folded
        # Transpose) is packed once as a contiguous (K, N): OpenBLAS runs the transposed
        # view 10-20% slower (GPT-2's LM head: 134 vs 154 GFLOP/s here).
        self._b_src = info.constant(1)
        self._b_packed: np.ndarray | None = None
        # A constant float32 B is packed for the compiled GEMM where it is preferred
        # (native.gemm: 6-15% faster than OpenBLAS on these shapes, see csrc/gemm.c).
        self._b_gemm: native.PackedMatrix | None = None
        src = self._b_src
        if isinstance(src, np.ndarray) and src.ndim == 2 and native.GEMM_PREFERRED:
            self._b_gemm = native.pack_gemm_b(src.T if self.attrs.trans_b else src)
        if self._b_gemm is None and self.attrs.trans_b and isinstance(src, np.ndarray) and src.ndim == 2:
            self._b_packed = contiguous_transpose(src)

    def compute(self, a, b, bias=None):
        if a.ndim < 2 or b.ndim < 2:
            raise ValueError(f"FusedMatMul operands must have rank >= 2, got {a.shape} and {b.shape}")
        cdt = compute_dtype(a.dtype)
        am = a.astype(cdt, copy=False)
        if self.attrs.trans_a:
            am = np.swapaxes(am, -1, -2)
        y = None
        if b is self._b_src and self._b_gemm is not None:
            # the bias is added by the GEMM as each tile is finished, when alpha is 1
            n = self._b_gemm.shape[1]
            fused_bias = bias if self.attrs.alpha == 1.0 and is_row_vector(bias, n) else None
            y = packed_product(am, self._b_gemm, fused_bias)
            if y is not None and fused_bias is not None:
                bias = None  # added already, tile by tile
        if y is None:
            if b is self._b_src and self._b_packed is not None and self._b_packed.dtype == cdt:
                bm = self._b_packed
            else:
                bm = b.astype(cdt, copy=False)
                if self.attrs.trans_b:
                    bm = np.swapaxes(bm, -1, -2)
            if am.shape[-1] != bm.shape[-2]:
                raise ValueError(f"A' {am.shape} and B' {bm.shape}: inner dimensions differ")
            y = matmul(am, bm)
        if self.attrs.alpha != 1.0:
            y *= cdt.type(self.attrs.alpha)
        if bias is not None:
            y += bias.astype(cdt, copy=False)
        return (y.astype(a.dtype, copy=False),)


# The standard kernels, for models whose opset predates the operator.
registry.register("Gelu", since=FUSED_DOMAIN_VERSION, domain=FUSED_DOMAIN)(Gelu)
registry.register("LayerNormalization", since=FUSED_DOMAIN_VERSION, domain=FUSED_DOMAIN)(
    LayerNormalization
)


@registry.register("FusedGemm", since=FUSED_DOMAIN_VERSION, domain=FUSED_DOMAIN)
class FusedGemm(Gemm):
    """Gemm, then ``activation`` (FusedConv's: Relu, Sigmoid, Tanh, LeakyRelu, HardSigmoid,
    Clip, with ``activation_params``) in place on the product."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        name = info.attr("activation", "") or ""
        params = info.attr("activation_params", []) or []
        self.act = activation(info.node_name, name, params)
        # the compiled GEMM applies the activations it knows to each tile in registers
        self.native_act = native_activation(name, params) or (native.ACT_NONE, 0.0, 0.0)
        self._native_done = self.native_act[0] != native.ACT_NONE
        # the one-row product applies the activation itself only where it is compiled
        self.single_output = self._one_row_output() if self.act is None or self._native_done else None

    def compute(self, a, b, c=None):
        y, activated = self.product(a, b, c)
        if self.act is not None and not (activated and self._native_done):
            # Gemm's output is this call's own buffer (a view of one, from the compiled
            # GEMM's reshape): activated in place; a read-only one would be copied first.
            if not y.flags.writeable:
                y = y.copy()
            self.act(np, y)
        return (y,)


#: FusedElementwise's operators in csrc/elementwise_group.c's step-code order.
GROUP_OPS = ("Add", "Sub", "Mul", "Div", "Max", "Min", "Relu", "Sigmoid", "Tanh", "Abs", "Neg", "Exp", "Log", "Sqrt")
_BINARY = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide,
           "Max": np.maximum, "Min": np.minimum}
def _tanh(v: np.ndarray) -> np.ndarray:
    """The CPU Tanh kernel's function: onnxruntime's where compiled, numpy's otherwise."""
    y = native.tanh(v) if v.dtype == np.float32 else None
    return np.tanh(v) if y is None else y


# The step-by-step path computes each step with the function the unfused CPU kernel uses.
_UNARY = {"Relu": lambda v: np.maximum(v, np.float32(0)), "Sigmoid": _fast_sigmoid, "Tanh": _tanh,
          "Abs": np.abs, "Neg": np.negative, "Exp": np.exp, "Log": np.log, "Sqrt": np.sqrt}
_TENSOR, _SCALAR, _ROW = 0, 1, 2  # csrc/elementwise_group.c's operand kinds


@registry.register("FusedElementwise", since=FUSED_DOMAIN_VERSION, domain=FUSED_DOMAIN)
class FusedElementwise(Kernel):
    """A group of float32 elementwise operators (``ops``, one per step; ``args``, two per
    step: an input index below the node's input count, else an earlier step's result at
    ``index - inputs``; -1 for a unary step's second) in one compiled pass
    (csrc/elementwise_group.c), or step by step with the CPU's own functions where the
    compiled module is not built or the inputs' shapes differ from what the optimizer
    saw (numpy then broadcasts, as the unfused operators would)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.ops = [str(o) for o in info.attr("ops", [])]
        args = [int(a) for a in info.attr("args", [])]
        n_in = len(info.input_names)
        where = f"node {info.node_name!r} (FusedElementwise)"
        if not self.ops or len(args) != 2 * len(self.ops) or any(o not in GROUP_OPS for o in self.ops):
            raise InvalidGraph(f"{where}: bad ops/args attributes {self.ops} {args}")
        self.steps = [(op, args[2 * i], args[2 * i + 1]) for i, op in enumerate(self.ops)]
        for i, (op, a, b) in enumerate(self.steps):
            limit = n_in + i  # an operand comes before its step
            if not 0 <= a < limit or (b != -1 if op in _UNARY else not 0 <= b < limit):
                raise InvalidGraph(f"{where}: step {i} ({op}) reads operands {a}, {b} of {limit}")
        self.program = np.array([[GROUP_OPS.index(op), a, b] for op, a, b in self.steps], np.int32)
        # The group's constants (its scalars and rows), contiguous float32 once: a call
        # then looks only at its dynamic inputs, usually one or two of a dozen.
        constants = {i: info.constant(i) for i in range(n_in)}
        # (a copy, not np.ascontiguousarray, which makes a 0-d value 1-d)
        self._constants = {i: v if v.flags.c_contiguous else v.copy() for i, v in constants.items()
                           if isinstance(v, np.ndarray) and v.dtype == np.float32}
        self._dynamic = tuple(i for i in range(n_in) if i not in self._constants)
        #: (the dynamic inputs' shapes, the operand kinds — None where the compiled pass
        #: does not take them —, the row length, the output shape) of the last call
        self._kinds: tuple[list[tuple[int, ...]], tuple[int, ...] | None, int, tuple[int, ...]] | None = None
        self._native = native.ENABLED and hasattr(native, "elementwise_group")

    def compute(self, *inputs):
        if self._native and native.ENABLED:
            y = self._compiled(inputs)
            if y is not None:
                return (y,)
        values = list(inputs)
        for op, a, b in self.steps:
            fn = _UNARY.get(op)
            values.append(fn(values[a]) if fn is not None else _BINARY[op](values[a], values[b]))
        return (np.asarray(values[-1]),)

    def _compiled(self, inputs: tuple[np.ndarray, ...]) -> np.ndarray | None:
        """The group by csrc/elementwise_group.c, or None where an input is not float32 or
        does not keep the output's shape (one tensor shape; constants of one value or one
        per position of the last axis)."""
        if not inputs or len(inputs) > 64 or len(self.steps) > 256:
            return None  # csrc/elementwise_group.c's limits
        key = []
        for i in self._dynamic:
            x = inputs[i]
            if type(x) is not np.ndarray or x.dtype != np.float32:
                return None
            key.append(x.shape)
        if self._kinds is None or self._kinds[0] != key:
            self._classify(inputs, key)
        assert self._kinds is not None
        _, kinds, row, shape = self._kinds
        if kinds is None:
            return None  # (these shapes are not the group's: the numpy steps broadcast them)
        operands = list(inputs)
        for i in self._dynamic:
            if not operands[i].flags.c_contiguous:
                operands[i] = np.ascontiguousarray(operands[i])
        for i, v in self._constants.items():
            operands[i] = v
        y = np.empty(shape, np.float32)
        if y.size:
            native.elementwise_group(tuple(operands), kinds, y, self.program, row)
        return y

    def _classify(self, inputs: tuple[np.ndarray, ...], key: list[tuple[int, ...]]) -> None:
        """Cache in ``_kinds`` each operand's kind for inputs of these shapes, or None for
        the kinds where one does not keep the output's shape or is not float32."""
        self._kinds = (key, None, 0, ())
        operands = [self._constants.get(i, x) for i, x in enumerate(inputs)]
        if any(not isinstance(x, np.ndarray) or x.dtype != np.float32 for x in operands):
            return
        shape = max(operands, key=lambda x: (x.size, x.ndim)).shape  # the tensors' (the output's)
        if not shape:
            return
        row = shape[-1]
        kinds = []
        for x in operands:
            if x.shape == shape:
                kinds.append(_TENSOR)
            elif x.ndim > len(shape):
                return
            elif x.size == 1:
                kinds.append(_SCALAR)
            elif x.size == row and x.shape[-1] == row:
                kinds.append(_ROW)
            else:
                return
        self._kinds = (key, tuple(kinds), row, shape)
