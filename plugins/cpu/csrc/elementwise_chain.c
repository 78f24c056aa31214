/* A chain of float32 elementwise operators in one pass (the optimizer's FusedElementwise,
 * onyxrt.optimizer.elementwise_fusion): each step applies one operator to the running
 * value, with a constant operand (one value, or one per position of the last axis) for
 * the binary ones. numpy runs each step as a call over the whole array (~1 µs of
 * overhead each on small tensors, and one pass over memory each on large ones); here a
 * block of the value stays in L1 while every step runs over it.
 *
 * Each step computes what the unfused kernel computes, in float32: +, -, *, / and the
 * NaN-propagating maximum/minimum exactly (numpy's maximum(a, b) is a when a is NaN or
 * a > b, else b: its choice between -0.0 and 0.0 included); Sigmoid and Tanh are
 * onnxruntime's (logistic.c, as the CPU's kernels); Sqrt is exact; Exp and Log are the C
 * library's expf/logf, within an ulp of numpy's own float32 loops. */

#include <math.h>

#include "native.h"

/* Step codes: the order of onyxrt_cpu.kernels.fused.CHAIN_OPS. */
enum {
    OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_MAX, OP_MIN, /* binary: value op c (or c op value) */
    OP_RELU, OP_SIGMOID, OP_TANH, OP_ABS, OP_NEG, OP_EXP, OP_LOG, OP_SQRT, OP_COUNT
};

typedef struct {
    const float *x;
    float *y;
    idx n, row;              /* elements; the last axis' length (constants' period) */
    const int32_t *program;  /* per step: op, constant index (-1: none), swapped */
    idx steps;
    const float *constants;  /* concatenated */
    const idx *offsets;      /* per constant: start in `constants` */
    const idx *lengths;      /* per constant: 1 or `row` */
} ChainCall;

#define NAN_MAX(a, b) (((a) != (a) || (a) > (b)) ? (a) : (b))
#define NAN_MIN(a, b) (((a) != (a) || (a) < (b)) ? (a) : (b))

/* One binary step over v[0..len), the constant at position `pos` of its period. */
static inline __attribute__((always_inline)) void
binary_step(int op, float *v, idx len, const float *c, idx clen, idx pos, int swapped)
{
#define LOOP(EXPR)                                                                         \
    if (clen == 1) {                                                                       \
        const float k = c[0];                                                              \
        for (idx i = 0; i < len; i++) {                                                    \
            const float a = swapped ? k : v[i], b = swapped ? v[i] : k;                     \
            v[i] = (EXPR);                                                                 \
        }                                                                                  \
    } else {                                                                               \
        const float *kc = c + pos;                                                         \
        for (idx i = 0; i < len; i++) {                                                    \
            const float a = swapped ? kc[i] : v[i], b = swapped ? v[i] : kc[i];             \
            v[i] = (EXPR);                                                                 \
        }                                                                                  \
    }
    switch (op) {
    case OP_ADD: LOOP(a + b) break;
    case OP_SUB: LOOP(a - b) break;
    case OP_MUL: LOOP(a * b) break;
    case OP_DIV: LOOP(a / b) break;
    case OP_MAX: LOOP(NAN_MAX(a, b)) break;
    case OP_MIN: LOOP(NAN_MIN(a, b)) break;
    default: break;
    }
#undef LOOP
}

MULTIVERSION static void
run_block(const ChainCall *c, idx begin, idx len)
{
    float *v = c->y + begin;
    memcpy(v, c->x + begin, (size_t)len * sizeof(float));
    const idx pos = c->row > 0 ? begin % c->row : 0; /* blocks never cross a row (see below) */
    for (idx s = 0; s < c->steps; s++) {
        const int op = c->program[3 * s];
        const int k = c->program[3 * s + 1];
        if (op <= OP_MIN) {
            binary_step(op, v, len, c->constants + c->offsets[k], c->lengths[k], pos,
                        c->program[3 * s + 2]);
            continue;
        }
        switch (op) {
        case OP_RELU:
            for (idx i = 0; i < len; i++) {
                v[i] = NAN_MAX(v[i], 0.0f);
            }
            break;
        case OP_SIGMOID: onyxrt_logistic(v, v, len); break;
        case OP_TANH: onyxrt_tanh(v, v, len); break;
        case OP_ABS:
            for (idx i = 0; i < len; i++) {
                v[i] = fabsf(v[i]);
            }
            break;
        case OP_NEG:
            for (idx i = 0; i < len; i++) {
                v[i] = -v[i];
            }
            break;
        case OP_EXP:
            for (idx i = 0; i < len; i++) {
                v[i] = expf(v[i]);
            }
            break;
        case OP_LOG:
            for (idx i = 0; i < len; i++) {
                v[i] = logf(v[i]);
            }
            break;
        case OP_SQRT:
            for (idx i = 0; i < len; i++) {
                v[i] = sqrtf(v[i]);
            }
            break;
        default: break;
        }
    }
}

/* Blocks of at most CHAIN_BLOCK floats that never cross a row of a per-position constant. */
#define CHAIN_BLOCK 1024

static void
chain_range(void *ctx, idx begin, idx end)
{
    const ChainCall *c = (const ChainCall *)ctx;
    /* [begin, end) counts blocks: rows (each cut in blocks) or plain blocks. */
    if (c->row > 0) {
        const idx per_row = (c->row + CHAIN_BLOCK - 1) / CHAIN_BLOCK;
        for (idx b = begin; b < end; b++) {
            const idx r = b / per_row, j = (b % per_row) * CHAIN_BLOCK;
            const idx len = c->row - j < CHAIN_BLOCK ? c->row - j : CHAIN_BLOCK;
            run_block(c, r * c->row + j, len);
        }
    } else {
        for (idx b = begin; b < end; b++) {
            const idx start = b * CHAIN_BLOCK;
            run_block(c, start, c->n - start < CHAIN_BLOCK ? c->n - start : CHAIN_BLOCK);
        }
    }
}

/* elementwise_chain(x, y, program, constants, offsets, lengths, row): y = the program run
 * over x (both float32, n elements); program int32 [steps][3]; constants float32
 * (concatenated); offsets/lengths int64 per constant (length 1 or `row`); row: the last
 * axis' length when a constant has one value per position of it, else 0. */
PyObject *
py_elementwise_chain(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *xo, *yo, *po, *co, *oo, *lo;
    Py_ssize_t row;
    if (!PyArg_ParseTuple(args, "OOOOOOn", &xo, &yo, &po, &co, &oo, &lo, &row)) {
        return NULL;
    }
    enum { X, Y, P, C, O, L, VIEWS };
    Py_buffer v[VIEWS];
    memset(v, 0, sizeof(v));
    if (get_f32(xo, &v[X], 0, 0, "x") < 0) {
        return NULL;
    }
    const idx n = v[X].len / 4;
    if (get_f32(yo, &v[Y], 1, n, "y") < 0 || get_bytes(po, &v[P], 0, 0, 4, "program") < 0 ||
        get_f32(co, &v[C], 0, 0, "constants") < 0 || get_bytes(oo, &v[O], 0, 0, 8, "offsets") < 0 ||
        get_bytes(lo, &v[L], 0, v[O].len / 8, 8, "lengths") < 0) {
        release_all(v, VIEWS);
        return NULL;
    }
    const idx steps = v[P].len / 12, count = v[O].len / 8, total = v[C].len / 4;
    const int32_t *program = (const int32_t *)v[P].buf;
    const idx *offsets = (const idx *)v[O].buf, *lengths = (const idx *)v[L].buf;
    if (row < 0 || (row > 0 && n % row)) {
        release_all(v, VIEWS);
        PyErr_SetString(PyExc_ValueError, "elementwise_chain: row must divide the size");
        return NULL;
    }
    for (idx s = 0; s < steps; s++) {
        const int op = program[3 * s], k = program[3 * s + 1];
        const int bad_op = op < 0 || op >= OP_COUNT;
        const int bad_k = op <= OP_MIN && (k < 0 || k >= count || offsets[k] < 0 ||
                                           (lengths[k] != 1 && (row == 0 || lengths[k] != row)) ||
                                           offsets[k] + lengths[k] > total);
        if (bad_op || bad_k) {
            release_all(v, VIEWS);
            PyErr_Format(PyExc_ValueError, "elementwise_chain: bad step %zd", s);
            return NULL;
        }
    }
    ChainCall call = {(const float *)v[X].buf, (float *)v[Y].buf, n, row, program, steps,
                      (const float *)v[C].buf, offsets, lengths};
    const idx blocks = row > 0 ? (n / row) * ((row + CHAIN_BLOCK - 1) / CHAIN_BLOCK)
                               : (n + CHAIN_BLOCK - 1) / CHAIN_BLOCK;
    Py_BEGIN_ALLOW_THREADS
    parallel_for(chain_range, &call, blocks, 1 + MIN_PARALLEL_FLOATS / CHAIN_BLOCK);
    Py_END_ALLOW_THREADS
    release_all(v, VIEWS);
    Py_RETURN_NONE;
}
