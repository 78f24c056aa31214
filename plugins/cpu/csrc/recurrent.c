/* The recurrences of RNN, GRU and LSTM with their default activations (Tanh; Sigmoid and
 * Tanh; Sigmoid, Tanh and Tanh), float32. The input projections X W^T + biases of every
 * step are one GEMM made before the call (onyxrt_cpu.kernels.rnn); what is left is the part
 * that cannot be batched over time: per step and batch row, h R^T (a GEMV over R^T, held
 * in contiguous panels of 64 columns: see gemv_panels) and the gate
 * math, fused, with onnxruntime's Sigmoid/Tanh (logistic.c). In numpy that step was a
 * matmul and a dozen whole-array calls, ~20 µs of overhead per step before any work.
 *
 * Batch rows and directions are independent: each (direction, row) pair runs its whole
 * sequence on one thread of the pool, so a bidirectional layer at batch 1 uses two.
 * Arithmetic follows the operator library's kernel (onyxrt_ops.recurrent) operation by
 * operation: xw + (h R^T), then clip, then the activation; only the GEMV's summation
 * order differs (as between BLAS builds).
 */

#include "native.h"
#include "vec16.h"

enum { CELL_RNN = 0, CELL_GRU = 1, CELL_LSTM = 2 };

typedef struct {
    int cell;
    idx seq, batch, hidden, dirs;
    const float *xw;    /* [dirs][seq][batch][G]: input projections, biases folded in */
    const float *rt;    /* per direction: R^T's columns [0, split) in panels, then [split, G) */
    idx split;          /* G, or 2 hidden for GRU without linear_before_reset */
    const float *peep;  /* LSTM: [dirs][3 hidden] (i, o, f) or NULL */
    const float *rbh;   /* GRU with linear_before_reset: [dirs][hidden] or NULL */
    float *h, *c;       /* [dirs][batch][hidden]: initial states in, final states out */
    const int64_t *lens; /* [batch] valid steps, or NULL: all */
    float *y;           /* [dirs][seq][batch][hidden] */
    float *scratch;     /* per unit: G + 64 + hidden floats */
    int reverse;        /* bit d: direction d runs backwards */
    float clip;         /* > 0: gates clipped to [-clip, clip] before activation */
    int input_forget;   /* LSTM: f = 1 - i */
} RecurrentCall;

static inline idx
gate_count(int cell)
{
    return cell == CELL_LSTM ? 4 : cell == CELL_GRU ? 3 : 1;
}

/* R^T is held in panels of 64 columns: panel p is [hidden][64] floats, contiguous, zero
 * past the last column (onyxrt_cpu.kernels.rnn packs them), so that each 64-column block
 * of the GEMV streams one contiguous block of weights (in the plain [hidden][G] layout
 * every row of a block sat G floats from the last: a page apart at hidden 256).
 *
 * out[j] = base[j] + sum_k v[k] R^T[k, j] for the `cols` columns of `panels` (base may be
 * NULL: 0). The sum is made first and added to base last, as xw + h @ R^T is in numpy. */
static inline __attribute__((always_inline)) void
gemv_panels(const float *v, idx kn, const float *panels, idx cols, const float *base, float *out)
{
    for (idx j0 = 0; j0 < cols; j0 += 64) {
        const float *p = panels + j0 * kn; /* panel j0 / 64 */
        v16 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
        for (idx k = 0; k < kn; k++, p += 64) {
            const float s = v[k];
            a0 += s * *(const v16 *)p;
            a1 += s * *(const v16 *)(p + 16);
            a2 += s * *(const v16 *)(p + 32);
            a3 += s * *(const v16 *)(p + 48);
        }
        if (j0 + 64 <= cols) {
            if (base) {
                a0 += *(const v16 *)(base + j0);
                a1 += *(const v16 *)(base + j0 + 16);
                a2 += *(const v16 *)(base + j0 + 32);
                a3 += *(const v16 *)(base + j0 + 48);
            }
            *(v16 *)(out + j0) = a0;
            *(v16 *)(out + j0 + 16) = a1;
            *(v16 *)(out + j0 + 32) = a2;
            *(v16 *)(out + j0 + 48) = a3;
        } else {
            float tail[64];
            *(v16 *)tail = a0;
            *(v16 *)(tail + 16) = a1;
            *(v16 *)(tail + 32) = a2;
            *(v16 *)(tail + 48) = a3;
            for (idx j = 0; j < cols - j0; j++) {
                out[j0 + j] = base ? base[j0 + j] + tail[j] : tail[j];
            }
        }
    }
}

/* Floats of `cols` columns of R^T in panels. */
static inline idx
panel_floats(idx cols, idx hidden)
{
    return (cols + 63) / 64 * 64 * hidden;
}

static inline void
clip_to(float *x, idx n, float clip)
{
    if (clip > 0.0f) {
        for (idx j = 0; j < n; j++) {
            x[j] = x[j] < -clip ? -clip : (x[j] > clip ? clip : x[j]);
        }
    }
}

/* One time step of one (direction, batch row): g holds G floats, s hidden floats of scratch. */
MULTIVERSION static void
cell_step(const RecurrentCall *r, const float *xrow, const float *rt, const float *peep,
          const float *rbh, float *h, float *c, float *yrow, float *g, float *s)
{
    const idx hs = r->hidden, gs = gate_count(r->cell) * hs;
    if (r->cell == CELL_RNN) {
        gemv_panels(h, hs, rt, hs, xrow, g);
        clip_to(g, hs, r->clip);
        onyxrt_tanh(g, h, hs);
    } else if (r->cell == CELL_GRU) {
        /* Gates z, r, h. With rbh (linear_before_reset): cand = xh + r (h Rh^T + Rbh);
         * without: cand = xh + (r h) Rh^T. */
        gemv_panels(h, hs, rt, rbh ? gs : 2 * hs, NULL, g);
        for (idx j = 0; j < 2 * hs; j++) {
            g[j] = xrow[j] + g[j];
        }
        clip_to(g, 2 * hs, r->clip);
        onyxrt_logistic(g, g, 2 * hs);
        const float *z = g, *rg = g + hs;
        float *cand = g + 2 * hs;
        if (rbh) {
            for (idx j = 0; j < hs; j++) {
                cand[j] = xrow[2 * hs + j] + rg[j] * (cand[j] + rbh[j]);
            }
        } else {
            for (idx j = 0; j < hs; j++) {
                s[j] = rg[j] * h[j];
            }
            gemv_panels(s, hs, rt + panel_floats(2 * hs, hs), hs, xrow + 2 * hs, cand);
        }
        clip_to(cand, hs, r->clip);
        onyxrt_tanh(cand, cand, hs);
        for (idx j = 0; j < hs; j++) {
            h[j] = (1.0f - z[j]) * cand[j] + z[j] * h[j];
        }
    } else {
        /* Gates i, o, f, c; peepholes i, o, f. */
        gemv_panels(h, hs, rt, gs, xrow, g);
        float *gi = g, *go = g + hs, *gf = g + 2 * hs, *gc = g + 3 * hs;
        if (peep) {
            for (idx j = 0; j < hs; j++) {
                gi[j] = gi[j] + peep[j] * c[j];
                gf[j] = gf[j] + peep[2 * hs + j] * c[j];
            }
        }
        clip_to(gi, hs, r->clip);
        onyxrt_logistic(gi, gi, hs);
        if (!r->input_forget) {
            clip_to(gf, hs, r->clip);
            onyxrt_logistic(gf, gf, hs);
        }
        clip_to(gc, hs, r->clip);
        onyxrt_tanh(gc, gc, hs);
        for (idx j = 0; j < hs; j++) {
            const float f = r->input_forget ? 1.0f - gi[j] : gf[j];
            c[j] = f * c[j] + gi[j] * gc[j];
        }
        if (peep) {
            for (idx j = 0; j < hs; j++) {
                go[j] = go[j] + peep[hs + j] * c[j];
            }
        }
        clip_to(go, hs, r->clip);
        onyxrt_logistic(go, go, hs);
        onyxrt_tanh(c, s, hs);
        for (idx j = 0; j < hs; j++) {
            h[j] = go[j] * s[j];
        }
    }
    memcpy(yrow, h, (size_t)hs * sizeof(float));
}

/* Units [begin, end): unit u is direction u / batch, batch row u % batch. */
static void
recurrent_units(void *ctx, idx begin, idx end)
{
    const RecurrentCall *r = (const RecurrentCall *)ctx;
    const idx hs = r->hidden, gs = gate_count(r->cell) * hs;
    for (idx u = begin; u < end; u++) {
        float *scratch = r->scratch + u * (gs + 64 + hs);
        const idx d = u / r->batch, b = u % r->batch;
        const float *rt = r->rt + d * (panel_floats(r->split, hs) + panel_floats(gs - r->split, hs));
        const float *peep = r->peep ? r->peep + d * 3 * hs : NULL;
        const float *rbh = r->rbh ? r->rbh + d * hs : NULL;
        float *h = r->h + (d * r->batch + b) * hs;
        float *c = r->c ? r->c + (d * r->batch + b) * hs : NULL;
        const idx valid = r->lens ? (idx)r->lens[b] : r->seq;
        const int backwards = (r->reverse >> d) & 1;
        for (idx i = 0; i < r->seq; i++) {
            const idx t = backwards ? r->seq - 1 - i : i;
            const idx at = (d * r->seq + t) * r->batch + b;
            float *yrow = r->y + at * hs;
            if (t >= valid) {
                /* Past this row's length: zeros in Y, the state carried unchanged. */
                memset(yrow, 0, (size_t)hs * sizeof(float));
                continue;
            }
            cell_step(r, r->xw + at * gs, rt, peep, rbh, h, c, yrow, scratch, scratch + gs + 64);
        }
        if (r->lens && valid == 0) {
            /* A row with no step ends in zeros, not in its initial state (onnxruntime's). */
            memset(h, 0, (size_t)hs * sizeof(float));
            if (c) {
                memset(c, 0, (size_t)hs * sizeof(float));
            }
        }
    }
}

PyObject *
py_recurrent(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *xwo, *rto, *peepo, *rbho, *ho, *co, *lenso, *yo;
    int cell, reverse, input_forget;
    Py_ssize_t seq, batch, hidden, dirs, split;
    float clip;
    if (!PyArg_ParseTuple(args, "innnnnOOOOOOOOifi", &cell, &seq, &batch, &hidden, &dirs, &split,
                          &xwo, &rto, &peepo, &rbho, &ho, &co, &lenso, &yo, &reverse, &clip,
                          &input_forget)) {
        return NULL;
    }
    if (cell < CELL_RNN || cell > CELL_LSTM || seq < 0 || batch < 1 || hidden < 1 || dirs < 1 ||
        dirs > 2) {
        PyErr_SetString(PyExc_ValueError, "recurrent: bad cell or dimensions");
        return NULL;
    }
    const idx gs = gate_count(cell) * hidden;
    if (split < 1 || split > gs || (cell == CELL_GRU && split != gs && split != 2 * hidden) ||
        (cell != CELL_GRU && split != gs)) {
        PyErr_SetString(PyExc_ValueError, "recurrent: bad split of R's columns");
        return NULL;
    }
    const idx rt_floats = panel_floats(split, hidden) + panel_floats(gs - split, hidden);
    enum { XW, RT, PEEP, RBH, H, C, LENS, Y, VIEWS };
    Py_buffer views[VIEWS];
    memset(views, 0, sizeof(views));
    if (get_f32(xwo, &views[XW], 0, dirs * seq * batch * gs, "xw") < 0 ||
        get_f32(rto, &views[RT], 0, dirs * rt_floats, "rt panels") < 0 ||
        get_optional_f32(peepo, &views[PEEP], dirs * 3 * hidden, "peepholes") < 0 ||
        get_optional_f32(rbho, &views[RBH], dirs * hidden, "rbh") < 0 ||
        get_f32(ho, &views[H], 1, dirs * batch * hidden, "h") < 0 ||
        (co != Py_None && get_f32(co, &views[C], 1, dirs * batch * hidden, "c") < 0) ||
        (lenso != Py_None && get_bytes(lenso, &views[LENS], 0, batch, 8, "lens") < 0) ||
        get_f32(yo, &views[Y], 1, dirs * seq * batch * hidden, "y") < 0) {
        release_all(views, VIEWS);
        return NULL;
    }
    if (cell == CELL_LSTM && !views[C].buf) {
        release_all(views, VIEWS);
        PyErr_SetString(PyExc_ValueError, "recurrent: LSTM needs c");
        return NULL;
    }
    const int64_t *lens = (const int64_t *)views[LENS].buf;
    for (idx b = 0; lens && b < batch; b++) {
        if (lens[b] < 0 || lens[b] > seq) {
            release_all(views, VIEWS);
            PyErr_SetString(PyExc_ValueError, "recurrent: sequence lengths out of [0, seq]");
            return NULL;
        }
    }
    float *scratch = (float *)malloc((size_t)(dirs * batch * (gs + 64 + hidden)) * sizeof(float));
    if (!scratch) {
        release_all(views, VIEWS);
        return PyErr_NoMemory();
    }
    RecurrentCall call = {cell, seq, batch, hidden, dirs, (const float *)views[XW].buf,
                          (const float *)views[RT].buf, split, (const float *)views[PEEP].buf,
                          (const float *)views[RBH].buf, (float *)views[H].buf,
                          (float *)views[C].buf, lens, (float *)views[Y].buf, scratch, reverse,
                          clip, input_forget};
    Py_BEGIN_ALLOW_THREADS
    parallel_for(recurrent_units, &call, dirs * batch, 1);
    Py_END_ALLOW_THREADS
    free(scratch);
    release_all(views, VIEWS);
    Py_RETURN_NONE;
}
