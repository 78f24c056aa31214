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
    int failed; /* out of memory */
} CoupleCall;

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
            r[i * cc + j] = p[pair];
            r[j * cc + i] = 1.0f - p[pair];
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

/* svm_couple(p, out, n, c, eps): out (n, c) float32 = the class probabilities libsvm's
 * coupling makes of p (n, c (c - 1) / 2) float32 pair probabilities. */
PyObject *
py_svm_couple(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *po, *oo;
    Py_ssize_t n, c;
    float eps;
    if (!PyArg_ParseTuple(args, "OOnnf", &po, &oo, &n, &c, &eps)) {
        return NULL;
    }
    if (n < 0 || c < 2) {
        PyErr_SetString(PyExc_ValueError, "svm_couple: bad dimensions");
        return NULL;
    }
    const idx pairs = c * (c - 1) / 2;
    enum { P, O, VIEWS };
    Py_buffer views[VIEWS];
    memset(views, 0, sizeof(views));
    if (get_f32(po, &views[P], 0, n * pairs, "p") < 0 || get_f32(oo, &views[O], 1, n * c, "out") < 0) {
        release_all(views, VIEWS);
        return NULL;
    }
    CoupleCall call = {(const float *)views[P].buf, (float *)views[O].buf, c, pairs, eps, 0};
    Py_BEGIN_ALLOW_THREADS
    parallel_for(couple_rows, &call, n, 1 + 4096 / (c * c * 16 + 1));
    Py_END_ALLOW_THREADS
    release_all(views, VIEWS);
    if (call.failed) {
        return PyErr_NoMemory();
    }
    Py_RETURN_NONE;
}
