/* A group of float32 elementwise operators in one pass (the optimizer's FusedElementwise,
 * onyxrt.optimizer.elementwise_fusion): a program of steps, each one operator over one or
 * two operands — the node's inputs (whole tensors of the output's shape, or constants of
 * one value or one per position of the last axis) and earlier steps' results. numpy runs
 * each operator as a call over the whole array (~1 µs of overhead each on small tensors,
 * a pass over memory each on large ones); here every step runs over one block of the
 * tensor while the block's operands and results stay in L1.
 *
 * Each step computes what the unfused kernel computes, in float32: +, -, *, / and the
 * NaN-propagating maximum/minimum exactly (numpy's maximum(a, b) is a when a is NaN or
 * a > b, else b: its choice between -0.0 and 0.0 included); Sigmoid and Tanh are
 * onnxruntime's (logistic.c, as the CPU's kernels); Sqrt is exact; Exp and Log are the C
 * library's expf/logf, within an ulp of numpy's own float32 loops. */

#include <math.h>

#include "native.h"

/* Step codes: the order of onyxrt_cpu.kernels.fused.GROUP_OPS. */
enum {
    OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_MAX, OP_MIN, /* binary */
    OP_RELU, OP_SIGMOID, OP_TANH, OP_ABS, OP_NEG, OP_EXP, OP_LOG, OP_SQRT, OP_COUNT
};

/* Operands: the node's inputs, then the steps' results. An input is a whole tensor
 * (KIND_TENSOR), one value (KIND_SCALAR) or one value per position of the last axis
 * (KIND_ROW). */
enum { KIND_TENSOR = 0, KIND_SCALAR = 1, KIND_ROW = 2 };

#define GROUP_BLOCK 512
#define MAX_INPUTS 64
#define MAX_STEPS 256

typedef struct {
    const float *in[MAX_INPUTS];
    int kind[MAX_INPUTS];
    idx inputs;
    float *y;
    idx n, row;             /* elements; the last axis' length (0 when no KIND_ROW input) */
    const int32_t *program; /* per step: op, a, b (b -1 for unary) */
    idx steps;
} GroupCall;

#define NAN_MAX(a, b) (((a) != (a) || (a) > (b)) ? (a) : (b))
#define NAN_MIN(a, b) (((a) != (a) || (a) < (b)) ? (a) : (b))

/* out = a op b over len floats; a or b a single value when its stride is 0. */
static inline __attribute__((always_inline)) void
binary(int op, const float *a, idx sa, const float *b, idx sb, float *out, idx len)
{
#define LOOP(EXPR)                                                                         \
    if (sa && sb) {                                                                        \
        for (idx i = 0; i < len; i++) {                                                    \
            const float x = a[i], y = b[i];                                                \
            out[i] = (EXPR);                                                               \
        }                                                                                  \
    } else if (sa) {                                                                       \
        const float y = b[0];                                                              \
        for (idx i = 0; i < len; i++) {                                                    \
            const float x = a[i];                                                          \
            out[i] = (EXPR);                                                               \
        }                                                                                  \
    } else if (sb) {                                                                       \
        const float x = a[0];                                                              \
        for (idx i = 0; i < len; i++) {                                                    \
            const float y = b[i];                                                          \
            out[i] = (EXPR);                                                               \
        }                                                                                  \
    } else {                                                                               \
        const float x = a[0], y = b[0];                                                    \
        for (idx i = 0; i < len; i++) {                                                    \
            out[i] = (EXPR);                                                               \
        }                                                                                  \
    }
    switch (op) {
    case OP_ADD: LOOP(x + y) break;
    case OP_SUB: LOOP(x - y) break;
    case OP_MUL: LOOP(x * y) break;
    case OP_DIV: LOOP(x / y) break;
    case OP_MAX: LOOP(NAN_MAX(x, y)) break;
    case OP_MIN: LOOP(NAN_MIN(x, y)) break;
    default: break;
    }
#undef LOOP
}

/* out = op(a) over len floats (a a single value when its stride is 0). */
static inline __attribute__((always_inline)) void
unary(int op, const float *a, idx sa, float *out, idx len)
{
    if (!sa) {
        for (idx i = 0; i < len; i++) {
            out[i] = a[0];
        }
        a = out;
    }
    switch (op) {
    case OP_RELU:
        for (idx i = 0; i < len; i++) {
            out[i] = NAN_MAX(a[i], 0.0f);
        }
        break;
    case OP_SIGMOID: onyxrt_logistic(a, out, len); break;
    case OP_TANH: onyxrt_tanh(a, out, len); break;
    case OP_ABS:
        for (idx i = 0; i < len; i++) {
            out[i] = fabsf(a[i]);
        }
        break;
    case OP_NEG:
        for (idx i = 0; i < len; i++) {
            out[i] = -a[i];
        }
        break;
    case OP_EXP:
        for (idx i = 0; i < len; i++) {
            out[i] = expf(a[i]);
        }
        break;
    case OP_LOG:
        for (idx i = 0; i < len; i++) {
            out[i] = logf(a[i]);
        }
        break;
    case OP_SQRT:
        for (idx i = 0; i < len; i++) {
            out[i] = sqrtf(a[i]);
        }
        break;
    default: break;
    }
}

/* Operand `k` for the block at [begin, begin + len): its data and stride (0: one value). */
static inline const float *
operand(const GroupCall *c, const float *regs, idx k, idx begin, idx *stride)
{
    if (k >= c->inputs) {
        *stride = 1;
        return regs + (k - c->inputs) * GROUP_BLOCK;
    }
    switch (c->kind[k]) {
    case KIND_SCALAR: *stride = 0; return c->in[k];
    case KIND_ROW: *stride = 1; return c->in[k] + begin % c->row;
    default: *stride = 1; return c->in[k] + begin;
    }
}

MULTIVERSION static void
run_block(const GroupCall *c, float *regs, idx begin, idx len)
{
    for (idx s = 0; s < c->steps; s++) {
        const int op = c->program[3 * s];
        idx sa, sb = 0;
        const float *a = operand(c, regs, c->program[3 * s + 1], begin, &sa);
        float *out = s == c->steps - 1 ? c->y + begin : regs + s * GROUP_BLOCK;
        if (op <= OP_MIN) {
            const float *b = operand(c, regs, c->program[3 * s + 2], begin, &sb);
            binary(op, a, sa, b, sb, out, len);
        } else {
            unary(op, a, sa, out, len);
        }
    }
}

/* Blocks of at most GROUP_BLOCK floats that never cross a row when a KIND_ROW input
 * reads positions of the last axis. */
static void
group_range(void *ctx, idx begin, idx end)
{
    const GroupCall *c = (const GroupCall *)ctx;
    float *regs = (float *)malloc((size_t)(c->steps * GROUP_BLOCK) * sizeof(float));
    if (!regs) {
        return; /* the caller checked that this much can be had; see py_elementwise_group */
    }
    if (c->row > 0) {
        const idx per_row = (c->row + GROUP_BLOCK - 1) / GROUP_BLOCK;
        for (idx b = begin; b < end; b++) {
            const idx r = b / per_row, j = (b % per_row) * GROUP_BLOCK;
            run_block(c, regs, r * c->row + j, c->row - j < GROUP_BLOCK ? c->row - j : GROUP_BLOCK);
        }
    } else {
        for (idx b = begin; b < end; b++) {
            const idx start = b * GROUP_BLOCK;
            run_block(c, regs, start, c->n - start < GROUP_BLOCK ? c->n - start : GROUP_BLOCK);
        }
    }
    free(regs);
}

/* elementwise_group(inputs, kinds, y, program, row): y = the program (int32 [steps][3]:
 * op, a, b) over the float32 `inputs` (a sequence; kinds: 0 a tensor of y's size, 1 one
 * value, 2 `row` values), y float32. */
PyObject *
py_elementwise_group(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *seq, *kinds, *yo, *po;
    Py_ssize_t row;
    if (!PyArg_ParseTuple(args, "OOOOn", &seq, &kinds, &yo, &po, &row)) {
        return NULL;
    }
    if (!PyTuple_Check(seq) || !PyTuple_Check(kinds) || PyTuple_GET_SIZE(seq) != PyTuple_GET_SIZE(kinds) ||
        PyTuple_GET_SIZE(seq) > MAX_INPUTS) {
        PyErr_SetString(PyExc_ValueError, "elementwise_group: inputs and kinds must be tuples of one length");
        return NULL;
    }
    GroupCall call;
    memset(&call, 0, sizeof(call));
    call.inputs = PyTuple_GET_SIZE(seq);
    Py_buffer views[MAX_INPUTS + 2];
    memset(views, 0, sizeof(views));
    Py_buffer *yv = &views[MAX_INPUTS], *pv = &views[MAX_INPUTS + 1];
    int ok = get_f32(yo, yv, 1, 0, "y") == 0 && get_bytes(po, pv, 0, 0, 4, "program") == 0;
    const idx n = ok ? yv->len / 4 : 0;
    for (idx i = 0; ok && i < call.inputs; i++) {
        const long kind = PyLong_AsLong(PyTuple_GET_ITEM(kinds, i));
        const idx need = kind == KIND_SCALAR ? 1 : kind == KIND_ROW ? row : n;
        ok = (kind >= 0 && kind <= KIND_ROW && !(kind == KIND_ROW && (row < 1 || n % row)) &&
              get_f32(PyTuple_GET_ITEM(seq, i), &views[i], 0, need, "input") == 0);
        if (ok) {
            call.in[i] = (const float *)views[i].buf;
            call.kind[i] = (int)kind;
        } else if (!PyErr_Occurred()) {
            PyErr_Format(PyExc_ValueError, "elementwise_group: input %zd has kind %ld", i, kind);
        }
    }
    call.steps = ok ? pv->len / 12 : 0;
    const int32_t *program = ok ? (const int32_t *)pv->buf : NULL;
    for (idx s = 0; ok && s < call.steps; s++) {
        const int op = program[3 * s];
        const idx limit = call.inputs + s; /* operands must come before the step */
        const idx a = program[3 * s + 1], b = program[3 * s + 2];
        ok = op >= 0 && op < OP_COUNT && a >= 0 && a < limit && (op > OP_MIN ? b == -1 : (b >= 0 && b < limit));
        if (!ok) {
            PyErr_Format(PyExc_ValueError, "elementwise_group: bad step %zd", s);
        }
    }
    if (ok && (call.steps < 1 || call.steps > MAX_STEPS)) {
        ok = 0;
        PyErr_SetString(PyExc_ValueError, "elementwise_group: 1 to 256 steps");
    }
    void *probe = ok ? malloc((size_t)(call.steps * GROUP_BLOCK) * sizeof(float)) : NULL;
    if (ok && !probe) {
        ok = 0;
        PyErr_NoMemory();
    }
    free(probe);
    if (!ok) {
        for (idx i = 0; i < MAX_INPUTS + 2; i++) {
            release(&views[i]);
        }
        return NULL;
    }
    call.y = (float *)yv->buf;
    call.n = n;
    call.row = row;
    call.program = program;
    int has_row = 0;
    for (idx i = 0; i < call.inputs; i++) {
        has_row |= call.kind[i] == KIND_ROW;
    }
    if (!has_row) {
        call.row = 0;
    }
    const idx blocks = call.row > 0 ? (n / call.row) * ((call.row + GROUP_BLOCK - 1) / GROUP_BLOCK)
                                    : (n + GROUP_BLOCK - 1) / GROUP_BLOCK;
    Py_BEGIN_ALLOW_THREADS
    parallel_for(group_range, &call, blocks, 1 + MIN_PARALLEL_FLOATS / GROUP_BLOCK);
    Py_END_ALLOW_THREADS
    for (idx i = 0; i < MAX_INPUTS + 2; i++) {
        release(&views[i]);
    }
    Py_RETURN_NONE;
}

/* Where(condition, X, Y) for 4-byte elements when the condition and one operand have the
 * output's size and the other operand is one value (a NaN guard after a softmax, a mask
 * over attention scores): out[i] = cond[i] ? a[i] : b with `scalar_is_x` 0, or cond[i] ?
 * b : a[i] with 1 — bit copies, so NaN payloads and signed zeros pass unchanged. */
typedef struct {
    const uint8_t *cond;
    const uint32_t *full;
    uint32_t scalar;
    int scalar_is_x;
    uint32_t *out;
} SelectCall;

MULTIVERSION static void
select_range(void *ctx, idx begin, idx end)
{
    const SelectCall *c = (const SelectCall *)ctx;
    const uint32_t s = c->scalar;
    const uint8_t *cond = c->cond;
    const uint32_t *full = c->full;
    uint32_t *out = c->out;
    if (c->scalar_is_x) {
        for (idx i = begin; i < end; i++) {
            out[i] = cond[i] ? s : full[i];
        }
    } else {
        for (idx i = begin; i < end; i++) {
            out[i] = cond[i] ? full[i] : s;
        }
    }
}

/* select4(cond, full, scalar, scalar_is_x, out): see select_range. */
PyObject *
py_select4(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *co, *fo, *so, *oo;
    int scalar_is_x;
    if (!PyArg_ParseTuple(args, "OOOpO", &co, &fo, &so, &scalar_is_x, &oo)) {
        return NULL;
    }
    enum { C, F, S, O, VIEWS };
    Py_buffer v[VIEWS];
    memset(v, 0, sizeof(v));
    if (get_bytes(co, &v[C], 0, 0, 1, "condition") < 0 || get_bytes(fo, &v[F], 0, v[C].len, 4, "operand") < 0 ||
        get_bytes(so, &v[S], 0, 1, 4, "scalar") < 0 || get_bytes(oo, &v[O], 1, v[C].len, 4, "out") < 0) {
        release_all(v, VIEWS);
        return NULL;
    }
    SelectCall call = {(const uint8_t *)v[C].buf, (const uint32_t *)v[F].buf, *(const uint32_t *)v[S].buf,
                       scalar_is_x, (uint32_t *)v[O].buf};
    Py_BEGIN_ALLOW_THREADS
    parallel_for(select_range, &call, v[C].len, 4 * MIN_PARALLEL_FLOATS);
    Py_END_ALLOW_THREADS
    release_all(v, VIEWS);
    Py_RETURN_NONE;
}
