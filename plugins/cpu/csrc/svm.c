/* The two costly pieces of ai.onnx.ml's SVMs (onyxrt_ops.ml's _SVM and SVMClassifier):
 * the RBF kernel values K(x, v) = exp(-gamma * |x - v|^2), and libsvm's pairwise coupling
 * of Platt-scaled pair probabilities into class probabilities. Over numpy, the coupling is
 * an iteration of a dozen whole-array calls per class and step, and the kernel a
 * (rows, vectors, features) temporary: a 3-class SVC with probabilities took 0.4-0.6 ms a
 * sample against onnxruntime's 15 µs.
 *
 * Both compute in float32 what the library's numpy code computes, in onnxruntime's order
 * (svmclassifier.cc, ml_common.h's multiclass_probability): a squared distance summed
 * feature by feature (sixteen support vectors at once, one per vector lane, so that each
 * lane's sum keeps that order), the coupling's sums element by element. */

#include <math.h>

#include "native.h"
#include "vec16.h"

/* ---------------------------------------------------------------------------- RBF kernel */

typedef struct {
    const float *x;   /* (n, f) */
    const float *svt; /* (f, v): the support vectors transposed */
    float *out;       /* (n, v) */
    idx f, v;
    float gamma;
} RbfCall;

MULTIVERSION static void
rbf_rows(void *ctx, idx begin, idx end)
{
    const RbfCall *c = (const RbfCall *)ctx;
    const idx f = c->f, v = c->v;
    for (idx n = begin; n < end; n++) {
        const float *xr = c->x + n * f;
        float *o = c->out + n * v;
        idx j = 0;
        for (; j + 16 <= v; j += 16) {
            v16 acc = {0};
            for (idx k = 0; k < f; k++) {
                const v16 d = xr[k] - *(const v16 *)(c->svt + k * v + j);
                acc += d * d;
            }
            *(v16 *)(o + j) = acc;
        }
        for (; j < v; j++) {
            float acc = 0.0f;
            for (idx k = 0; k < f; k++) {
                const float d = xr[k] - c->svt[k * v + j];
                acc += d * d;
            }
            o[j] = acc;
        }
        for (j = 0; j < v; j++) {
            o[j] = expf(-c->gamma * o[j]);
        }
    }
}

/* svm_rbf(x, svt, out, n, f, v, gamma): out (n, v) = exp(-gamma * sum_k (x[., k] - svt[k, .])^2),
 * all float32, C-contiguous. */
PyObject *
py_svm_rbf(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *xo, *so, *oo;
    Py_ssize_t n, f, v;
    float gamma;
    if (!PyArg_ParseTuple(args, "OOOnnnf", &xo, &so, &oo, &n, &f, &v, &gamma)) {
        return NULL;
    }
    if (n < 0 || f < 0 || v < 0) {
        PyErr_SetString(PyExc_ValueError, "svm_rbf: bad dimensions");
        return NULL;
    }
    enum { X, S, O, VIEWS };
    Py_buffer views[VIEWS];
    memset(views, 0, sizeof(views));
    if (get_f32(xo, &views[X], 0, n * f, "x") < 0 || get_f32(so, &views[S], 0, f * v, "svt") < 0 ||
        get_f32(oo, &views[O], 1, n * v, "out") < 0) {
        release_all(views, VIEWS);
        return NULL;
    }
    RbfCall call = {(const float *)views[X].buf, (const float *)views[S].buf, (float *)views[O].buf, f, v, gamma};
    Py_BEGIN_ALLOW_THREADS
    parallel_for(rbf_rows, &call, n, 1 + MIN_PARALLEL_FLOATS / (f * v + 1));
    Py_END_ALLOW_THREADS
    release_all(views, VIEWS);
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------- pairwise coupling */

typedef struct {
    const float *p; /* (n, pairs): P(class i over class j) for pair (i, j), i < j, in order */
    float *out;     /* (n, c) */
    idx c, pairs;
    float eps;
    const float *a, *b; /* Platt's (pairs,) parameters: p holds decision values; NULL: probabilities */
    int failed;         /* out of memory */
} CoupleCall;

/* The pair probability of decision value s under Platt's a, b, as onnxruntime's
 * sigmoid_probability and its clamp: 1 - logistic(s a + b) within [1e-7, 1 - 1e-7]. */
static inline float
platt(float s, float a, float b)
{
    const float val = s * a + b;
    const float v = 1.0f / (1.0f + expf(-fabsf(val)));
    float p = 1.0f - (val < 0.0f ? 1.0f - v : v);
    const float lo = 1e-7f, hi = (float)(1.0 - 1e-7);
    p = p < lo ? lo : p; /* (NaN stays NaN) */
    return p > hi ? hi : p;
}

/* One sample: r[i][j] = p(pair), r[j][i] = 1 - p(pair); Q[i][i] = sum_j r[j][i]^2 (j != i),
 * Q[i][j] = -r[j][i] r[i][j]; then at most max(100, c) rounds of libsvm's update, each
 * round starting with the stopping test on Qp and pQp recomputed. */
static void
couple_one(const CoupleCall *c, const float *p, float *prob, float *r, float *q, float *qp)
{
    const idx cc = c->c;
    for (idx i = 0; i < cc * cc; i++) {
        r[i] = 0.0f;
    }
    idx pair = 0;
    for (idx i = 0; i + 1 < cc; i++) {
        for (idx j = i + 1; j < cc; j++, pair++) {
            const float pp = c->a != NULL ? platt(p[pair], c->a[pair], c->b[pair]) : p[pair];
            r[i * cc + j] = pp;
            r[j * cc + i] = 1.0f - pp;
        }
    }
    for (idx i = 0; i < cc; i++) {
        float diag = 0.0f;
        for (idx j = 0; j < cc; j++) {
            if (j != i) {
                diag += r[j * cc + i] * r[j * cc + i];
            }
        }
        for (idx j = 0; j < cc; j++) {
            q[i * cc + j] = j == i ? diag : -r[j * cc + i] * r[i * cc + j];
        }
        prob[i] = 1.0f / (float)cc;
    }
    const idx rounds = cc > 100 ? cc : 100;
    for (idx round = 0; round < rounds; round++) {
        float pqp = 0.0f;
        for (idx i = 0; i < cc; i++) {
            float s = 0.0f;
            for (idx j = 0; j < cc; j++) {
                s += q[i * cc + j] * prob[j];
            }
            qp[i] = s;
        }
        for (idx i = 0; i < cc; i++) {
            pqp += prob[i] * qp[i];
        }
        float error = 0.0f;
        for (idx i = 0; i < cc; i++) {
            const float e = fabsf(qp[i] - pqp);
            error = e > error ? e : error;
        }
        if (error < c->eps) {
            break;
        }
        for (idx i = 0; i < cc; i++) {
            const float qii = q[i * cc + i];
            const float diff = (pqp - qp[i]) / qii;
            prob[i] = prob[i] + diff;
            pqp = (pqp + diff * (diff * qii + 2.0f * qp[i])) / (1.0f + diff) / (1.0f + diff);
            const float scale = 1.0f + diff;
            for (idx j = 0; j < cc; j++) {
                qp[j] = (qp[j] + diff * q[i * cc + j]) / scale;
                prob[j] = prob[j] / scale;
            }
        }
    }
}

static void
couple_rows(void *ctx, idx begin, idx end)
{
    CoupleCall *c = (CoupleCall *)ctx;
    const idx cc = c->c;
    float *scratch = (float *)malloc(sizeof(float) * (size_t)(2 * cc * cc + cc));
    if (scratch == NULL) {
        __atomic_store_n(&c->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    for (idx n = begin; n < end; n++) {
        couple_one(c, c->p + n * c->pairs, c->out + n * cc, scratch, scratch + cc * cc, scratch + 2 * cc * cc);
    }
    free(scratch);
}

/* svm_couple(p, out, n, c, eps[, a, b]): out (n, c) float32 = the class probabilities
 * libsvm's coupling makes of p (n, c (c - 1) / 2) float32 pair probabilities — with a, b
 * (pairs,) float32, of p's decision values Platt-scaled first. */
PyObject *
py_svm_couple(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *po, *oo, *ao = Py_None, *bo = Py_None;
    Py_ssize_t n, c;
    float eps;
    if (!PyArg_ParseTuple(args, "OOnnf|OO", &po, &oo, &n, &c, &eps, &ao, &bo)) {
        return NULL;
    }
    if (n < 0 || c < 2) {
        PyErr_SetString(PyExc_ValueError, "svm_couple: bad dimensions");
        return NULL;
    }
    const idx pairs = c * (c - 1) / 2;
    enum { P, O, A, B, VIEWS };
    Py_buffer views[VIEWS];
    memset(views, 0, sizeof(views));
    const int scaled = ao != Py_None;
    if (get_f32(po, &views[P], 0, n * pairs, "p") < 0 || get_f32(oo, &views[O], 1, n * c, "out") < 0 ||
        (scaled && (get_f32(ao, &views[A], 0, pairs, "a") < 0 || get_f32(bo, &views[B], 0, pairs, "b") < 0))) {
        release_all(views, VIEWS);
        return NULL;
    }
    CoupleCall call = {(const float *)views[P].buf, (float *)views[O].buf, c, pairs, eps,
                       scaled ? (const float *)views[A].buf : NULL, scaled ? (const float *)views[B].buf : NULL, 0};
    Py_BEGIN_ALLOW_THREADS
    parallel_for(couple_rows, &call, n, 1 + 4096 / (c * c * 16 + 1));
    Py_END_ALLOW_THREADS
    release_all(views, VIEWS);
    if (call.failed) {
        return PyErr_NoMemory();
    }
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------- one-vs-one decisions */

typedef struct {
    const float *k;      /* (n, v): the kernel values */
    const double *wt;    /* (m, v): each pair's weights over the vectors */
    const double *rho;   /* (m,) */
    const int64_t *pi, *pj; /* (m,): the pair's classes */
    float *s;            /* (n, m): the decision values */
    int64_t *label;      /* (n,): the vote winner (the first of equal counts) */
    idx v, m, c;
    int failed;
} DecideCall;

static void
decide_rows(void *ctx, idx begin, idx end)
{
    DecideCall *c = (DecideCall *)ctx;
    int64_t *votes = (int64_t *)malloc(sizeof(int64_t) * (size_t)c->c);
    if (votes == NULL) {
        __atomic_store_n(&c->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    for (idx n = begin; n < end; n++) {
        const float *kr = c->k + n * c->v;
        for (idx q = 0; q < c->c; q++) {
            votes[q] = 0;
        }
        for (idx p = 0; p < c->m; p++) {
            const double *w = c->wt + p * c->v;
            double acc = 0.0;
            for (idx j = 0; j < c->v; j++) {
                acc += (double)kr[j] * w[j];
            }
            const float s = (float)(acc + c->rho[p]);
            c->s[n * c->m + p] = s;
            if (s > 0.0f) {
                votes[c->pi[p]]++;
            } else if (s <= 0.0f) { /* NaN votes for neither */
                votes[c->pj[p]]++;
            }
        }
        idx best = 0;
        for (idx q = 1; q < c->c; q++) {
            best = votes[q] > votes[best] ? q : best;
        }
        c->label[n] = best;
    }
    free(votes);
}

/* svm_decide(k, wt, rho, pi, pj, s, label, n, v, m, c): the one-vs-one decision values
 * s (n, m) float32 = float32(sum_j k[., j] wt[p, j] + rho[p]) summed in double vector by
 * vector (onnxruntime's order), and the vote winner per row into label (n,) int64. */
PyObject *
py_svm_decide(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *ko, *wo, *ro, *io, *jo, *so, *lo;
    Py_ssize_t n, v, m, c;
    if (!PyArg_ParseTuple(args, "OOOOOOOnnnn", &ko, &wo, &ro, &io, &jo, &so, &lo, &n, &v, &m, &c)) {
        return NULL;
    }
    if (n < 0 || v < 0 || m < 1 || c < 2) {
        PyErr_SetString(PyExc_ValueError, "svm_decide: bad dimensions");
        return NULL;
    }
    enum { K, W, R, I, J, S, L, VIEWS };
    Py_buffer views[VIEWS];
    memset(views, 0, sizeof(views));
    if (get_f32(ko, &views[K], 0, n * v, "k") < 0 || get_bytes(wo, &views[W], 0, m * v, 8, "wt") < 0 ||
        get_bytes(ro, &views[R], 0, m, 8, "rho") < 0 || get_bytes(io, &views[I], 0, m, 8, "pi") < 0 ||
        get_bytes(jo, &views[J], 0, m, 8, "pj") < 0 || get_f32(so, &views[S], 1, n * m, "s") < 0 ||
        get_bytes(lo, &views[L], 1, n, 8, "label") < 0) {
        release_all(views, VIEWS);
        return NULL;
    }
    const int64_t *pi = (const int64_t *)views[I].buf, *pj = (const int64_t *)views[J].buf;
    for (idx p = 0; p < m; p++) {
        if (pi[p] < 0 || pi[p] >= c || pj[p] < 0 || pj[p] >= c) {
            release_all(views, VIEWS);
            PyErr_SetString(PyExc_ValueError, "svm_decide: a pair's class is out of range");
            return NULL;
        }
    }
    DecideCall call = {(const float *)views[K].buf, (const double *)views[W].buf, (const double *)views[R].buf,
                       pi, pj, (float *)views[S].buf, (int64_t *)views[L].buf, v, m, c, 0};
    Py_BEGIN_ALLOW_THREADS
    parallel_for(decide_rows, &call, n, 1 + MIN_PARALLEL_FLOATS / (m * v + 1));
    Py_END_ALLOW_THREADS
    release_all(views, VIEWS);
    if (call.failed) {
        return PyErr_NoMemory();
    }
    Py_RETURN_NONE;
}
