/* The module: its method table and constants. */

#include "native.h"

static PyMethodDef methods[] = {
    {"gelu_erf", py_gelu_erf, METH_VARARGS,
     "gelu_erf(x, out, coefficients, clamp, t_scale, scale): out = x * (0.5 + 0.5 erf(x * scale))."},
    {"unary_activation", py_unary_activation, METH_VARARGS,
     "unary_activation(x, out, kind, p0, p1): LeakyRelu/HardSigmoid/HardSwish/ThresholdedRelu of float32 x."},
    {"erf32", py_erf32, METH_VARARGS,
     "erf32(x, out, coefficients, clamp, t_scale): out = erf(x), erf_float32's polynomial and operations."},
    {"qgemm_u8s8", py_qgemm_u8s8, METH_VARARGS,
     "qgemm_u8s8(a, packed_b, out, m, n, k): out = a (uint8, m x k) @ b (int8, packed) in int32."},
    {"qgemm_pack", py_qgemm_pack, METH_VARARGS,
     "qgemm_pack(b, packed, column_sums, k, n): int8 b (k x n) in qgemm_u8s8's layout, and its "
     "column sums in int32."},
    {"select4", py_select4, METH_VARARGS,
     "select4(cond, full, scalar, scalar_is_x, out): Where of 4-byte elements with one operand "
     "a single value."},
    {"qgemm_float", py_qgemm_float, METH_VARARGS,
     "qgemm_float(a, packed_b, col_sub, row_sum, col_zb, scale, bias, y, m, n, k): y = float32(a @ b "
     "- the zero points' terms) * scale + bias, in the int8 GEMM's registers."},
    {"qlinear_add", py_qlinear_add, METH_VARARGS,
     "qlinear_add(a, b, y, za, zb, ra, rb, zc, signed): QLinearAdd of two 8-bit tensors of one "
     "shape in one pass."},
    {"qconv", py_qconv, METH_VARARGS,
     "qconv(x, a, rowsum_a, zp_a, bias, scale, y, geometry, flip, zp_b, y_scale, y_zero_point, "
     "lo, hi[, int32_out]): QLinearConv of 8-bit NCHW x by the weights a (uint8, M x K per group) "
     "through the int8 GEMM, requantized into y (int32_out: the exact int32 sums, ConvInteger)."},
    {"qconv_depthwise", py_qconv_depthwise, METH_VARARGS,
     "qconv_depthwise(x, w, bias, scale, y, geometry, flip, zp_x, y_scale, y_zero_point, lo, "
     "hi[, int32_out]): QLinearConv with one input channel per group, w (int16, centered)."},
    {"qgemm_supported", py_qgemm_supported, METH_NOARGS,
     "qgemm_supported() -> whether this CPU has AVX-512 VNNI for qgemm_u8s8."},
    {"logistic_tanh", py_logistic_tanh, METH_VARARGS,
     "logistic_tanh(x, out, tanh): out = sigmoid(x), or tanh(x), as onnxruntime's MLAS computes them."},
    {"elementwise_group", py_elementwise_group, METH_VARARGS,
     "elementwise_group(inputs, kinds, y, program, row): FusedElementwise's program over its "
     "float32 inputs into y in one pass."},
    {"accumulators_to_float", py_accumulators_to_float, METH_VARARGS,
     "accumulators_to_float(acc, scale, bias, y, rows, n): y = float32(acc) * scale + bias, "
     "in one pass."},
    {"dequantize4", py_dequantize4, METH_VARARGS,
     "dequantize4(b, scales, zero_points, w, n, blocks, block, k): MatMulNBits' 4-bit weights "
     "as float32 (N, K)."},
    {"quantize8", py_quantize8, METH_VARARGS,
     "quantize8(x, y, scale, zero_point, signed, dequantize): per-tensor QuantizeLinear of "
     "float32 x into (u)int8 y, or with dequantize DequantizeLinear of (u)int8 x into float32 y."},
    {"recurrent", py_recurrent, METH_VARARGS,
     "recurrent(cell, seq, batch, hidden, dirs, xw, rt, peepholes, rbh, h, c, lens, y, reverse, "
     "clip, input_forget): the recurrence of RNN (0), GRU (1) or LSTM (2) with default "
     "activations; h and c updated in place, y written."},
    {"gelu_tanh", py_gelu_tanh, METH_VARARGS,
     "gelu_tanh(x, out): out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."},
    {"epilogue", py_epilogue, METH_VARARGS,
     "epilogue(y, channels, length, bias, z, act, p0, p1): y = act(y + bias + z) in place."},
    {"depthwise", py_depthwise, METH_VARARGS,
     "depthwise(x, w, y, geometry, m_per_g[, bias, z, act, p0, p1]): 2-D depthwise "
     "convolution into y, each output plane finished by the epilogue as it is made."},
    {"winograd_input", py_winograd_input, METH_VARARGS,
     "winograd_input(x, v, geometry): F(2x2, 3x3) input transform into v (16, C, tiles)."},
    {"winograd_output", py_winograd_output, METH_VARARGS,
     "winograd_output(products, y, geometry, M, bias, z, act, p0, p1): output transform "
     "of (16, M, tiles) into y with bias, residual and activation."},
    {"normalize_rows", py_normalize_rows, METH_VARARGS,
     "normalize_rows(x, out, n, norm): each row of n floats over its max (0), L1 (1) or L2 (2) norm."},
    {"log_softmax", py_log_softmax, METH_VARARGS,
     "log_softmax(x, out, n): log-softmax over each contiguous row of n floats."},
    {"softmax", py_softmax, METH_VARARGS,
     "softmax(x, out, n): softmax over each contiguous row of n floats."},
    {"layernorm", py_layernorm, METH_VARARGS,
     "layernorm(x, out, n, scale, bias, epsilon, mean, inv_std_dev): per row of n floats."},
    {"maxpool", py_maxpool, METH_VARARGS,
     "maxpool(x, y, geometry): 2-D max pooling of x (N, C, H, W) into y, -inf padding."},
    {"global_average", py_global_average, METH_VARARGS,
     "global_average(x, y, rows, plane): y[r] = the mean of x's r-th run of plane floats."},
    {"im2col", py_im2col, METH_VARARGS,
     "im2col(x, cols, geometry, r0, rows): 2-D column matrix of output rows [r0, r0+rows)."},
    {"gemm_pack", py_gemm_pack, METH_VARARGS,
     "gemm_pack(src, line_stride, k_stride, lines, k, side_b, packed): pack rows of A "
     "(side_b False) or columns of B for gemm."},
    {"gemm", py_gemm, METH_VARARGS,
     "gemm(a, ars, acs, a_packed, b, brs, bcs, b_packed, c, m, n, k[, row_bias, col_bias, z, "
     "act, p0, p1]): C = act(A @ B + bias + z) (C and z 2-D, rows contiguous)."},
    {"tree_forest", py_tree_forest, METH_VARARGS,
     "tree_forest(roots, feature, split, mode, true_id, true_leaf, false_id, false_leaf, "
     "missing_true, weights, leaves, targets) -> a forest held for tree_run (weights None: "
     "a walk forest)."},
    {"svm_rbf", py_svm_rbf, METH_VARARGS,
     "svm_rbf(x, svt, out, n, f, v, gamma): out (n, v) float32 = exp(-gamma * |x_n - svt[:, v]|^2)"},
    {"svm_decide", py_svm_decide, METH_VARARGS,
     "svm_decide(k, wt, rho, pi, pj, s, label, n, v, m, c): one-vs-one decision values and vote winners"},
    {"svm_couple", py_svm_couple, METH_VARARGS,
     "svm_couple(p, out, n, c, eps): out (n, c) float32 = libsvm's coupling of the pair probabilities p"},
    {"tree_run", py_tree_run, METH_VARARGS,
     "tree_run(forest, x, out, n, features): out int64 (n, trees) = the leaves reached, or "
     "for a forest with weights float32 (n, targets) = each row's summed leaf weights; x "
     "float32 or float64."},
    {"classify_row", py_classify_row, METH_VARARGS,
     "classify_row(a, b, scores, k, n, bias, post) -> index: scores = a @ B + bias (B in "
     "gemv's panels), its arg-max (first of ties, NaN never wins), then softmax (post 1)."},
    {"gemv", py_gemv, METH_VARARGS,
     "gemv(a, b, y, k, n[, bias, act, p0, p1]): y (n) = act(a (k) @ b (k x n, in panels of 64 columns) + bias)."},
    {"transpose", py_transpose, METH_VARARGS,
     "transpose(src, rows, cols, dst): dst (cols, rows) = src (rows, cols) transposed."},
    {"gemm_batched", py_gemm_batched, METH_VARARGS,
     "gemm_batched(a, a_offset, a_batch_stride, a_row_stride, a_col_stride, b, b_offset, "
     "b_batch_stride, b_row_stride, b_col_stride, c, batch, m, n, k): c[e] = a[e] @ b[e] for "
     "strided float32 operands inside contiguous buffers (strides in floats); each product on "
     "one thread, the batch split over the pool."},
    {"pad", py_pad, METH_VARARGS,
     "pad(x, y, begins, mode, value): y = x padded (C-contiguous, one element size; mode 0 "
     "constant with the element `value` (bytes), 1 reflect, 2 edge, 3 wrap; pads >= 0)."},
    {"gemm_info", py_gemm_info, METH_NOARGS,
     "gemm_info() -> (MR, NR, KC, whether this CPU has AVX-512)."},
    {"threads", py_threads, METH_NOARGS,
     "threads() -> (pool size, threads a kernel splits over now)."},
    {"set_threads", py_set_threads, METH_VARARGS,
     "set_threads(n): the pool's size (the caller's thread included)."},
    {"blas_hooks", py_blas_hooks, METH_VARARGS,
     "blas_hooks(get_num_threads_address) -> address of the OpenBLAS threads callback; "
     "kernels then split over OpenBLAS's current thread count (0: none)."},
    {"nchwc_conv", py_nchwc_conv, METH_VARARGS,
     "nchwc_conv(x, blocked, groups, geometry, filters, out_blocks, y[, bias, z, act, p0, p1, "
     "wide]): convolution into NCHWc y from NCHWc (blocked) or NCHW x, filters packed; wide: "
     "the AVX-512 register tiles (1), the narrow ones (0), by the CPU (-1, the default)."},
    {"nchwc_depthwise", py_nchwc_depthwise, METH_VARARGS,
     "nchwc_depthwise(x, filters, y, geometry[, bias, z, act, p0, p1]): depthwise "
     "convolution in NCHWc (geometry's C counts blocks of 16)."},
    {"nchwc_maxpool", py_nchwc_maxpool, METH_VARARGS,
     "nchwc_maxpool(x, y, geometry): 2-D max pooling in NCHWc (geometry's C counts blocks), "
     "-inf padding, NaN propagating."},
    {"nchwc_mean", py_nchwc_mean, METH_VARARGS,
     "nchwc_mean(x, y, items, plane): y[i] = mean of the plane vectors of item i (NCHWc "
     "global average pool)."},
    {"nchwc_reorder", py_nchwc_reorder, METH_VARARGS,
     "nchwc_reorder(src, dst, N, C, plane, to_nchwc): NCHW <-> NCHWc (blocks of 16)."},
    {"guard_start", py_guard_start, METH_VARARGS,
     "guard_start(max_tensor_bytes, max_run_bytes) -> (guard, previous): a new memory guard "
     "as numpy's allocator in the current context (0: no limit)."},
    {"guard_stop", py_guard_stop, METH_VARARGS,
     "guard_stop(token): disarm the guard of guard_start's token, restore the previous allocator."},
    {"fast_run", py_fast_run, METH_VARARGS,
     "fast_run(plan, compiled, template, inputs, steps, output_names, output_slots, protected, "
     "limits_var, limits, guard_var, max_tensor, max_run, extobj_var, float_errors, thread_limit, "
     "slow, outputs_of) -> a host plan's run in one call (see onyxrt_cpu.fast_run)."},
    {"guard_state", py_guard_state, METH_VARARGS,
     "guard_state(guard) -> (live, peak, refused_kind, refused_bytes, refused_live)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_native",
    "onyxrt's CPU provider: compiled float32 inner loops (see onyxrt_cpu.native).", -1, methods,
    NULL, NULL, NULL, NULL, /* no slots, traverse, clear or free: the module holds no state */
};

PyMODINIT_FUNC
PyInit__native(void)
{
    threads_init();
    if (guard_init() < 0) {
        return NULL;
    }
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) {
        return NULL;
    }
    if (fast_run_init(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddIntConstant(m, "ACT_NONE", ACT_NONE) < 0 ||
        PyModule_AddIntConstant(m, "ACT_RELU", ACT_RELU) < 0 ||
        PyModule_AddIntConstant(m, "ACT_CLIP", ACT_CLIP) < 0 ||
        PyModule_AddIntConstant(m, "ACT_LEAKY", ACT_LEAKY) < 0 ||
        PyModule_AddIntConstant(m, "ERF_COEFFS", ERF_COEFFS) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
