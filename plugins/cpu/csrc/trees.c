/* The tree walk of the ai.onnx.ml tree ensembles (onyxrt_ops.ml's _Forest): the leaf each
 * (sample, tree) reaches. numpy walks all trees one level at a time with a dozen whole-array
 * calls per level (~35 µs a level for one sample: a 100-tree forest of depth 11 took 0.4 ms
 * a run against onnxruntime's 8 µs); here each walk is a loop over one tree's nodes.
 *
 * Node i tests x[feature[i]] <mode[i]> split[i] (modes BRANCH_LEQ, LT, GTE, GT, EQ, NEQ as
 * 0..5; BRANCH_MEMBER nodes stay with numpy), in float64: NaN compares false except under
 * NEQ, and a NaN at a node with missing_true goes the true way. The branch taken leads to a
 * leaf when its *_leaf flag is set, else to another node. */

#include "native.h"

typedef struct {
    const double *x;
    idx n, features, trees, nodes, leaves;
    const int64_t *roots, *feature, *mode, *true_id, *false_id;
    const double *split;
    const uint8_t *true_leaf, *false_leaf, *missing_true;
    int64_t *out;
    const float *weights; /* tree_scores: leaves x targets */
    float *scores;        /* tree_scores: rows x targets */
    idx targets;
    int bad; /* set when a walk leaves the nodes or runs longer than the node count */
} TreeCall;

/* The leaf tree `t` reaches for the row at `row`, or -1 for a walk that leaves the nodes
 * or runs longer than the node count (the caller reports it). */
static inline int64_t
walk_tree(const TreeCall *c, const double *row, idx t)
{
    int64_t node = c->roots[t];
    for (idx step = 0; step <= c->nodes; step++) {
        if (node < 0 || node >= c->nodes || c->feature[node] < 0 || c->feature[node] >= c->features) {
            return -1;
        }
        const double v = row[c->feature[node]], s = c->split[node];
        int cond;
        switch (c->mode[node]) {
        case 0: cond = v <= s; break;
        case 1: cond = v < s; break;
        case 2: cond = v >= s; break;
        case 3: cond = v > s; break;
        case 4: cond = v == s; break;
        default: cond = v != s; break;
        }
        if (v != v && c->missing_true[node]) {
            cond = 1;
        }
        const int64_t next = cond ? c->true_id[node] : c->false_id[node];
        if (cond ? c->true_leaf[node] : c->false_leaf[node]) {
            return next < c->leaves ? next : -1;
        }
        node = next;
    }
    return -1;
}

static void
walk_rows(void *ctx, idx begin, idx end)
{
    TreeCall *c = (TreeCall *)ctx;
    for (idx r = begin; r < end; r++) {
        const double *row = c->x + r * c->features;
        for (idx t = 0; t < c->trees; t++) {
            int64_t reached = walk_tree(c, row, t);
            if (reached < 0) {
                c->bad = 1; /* racy but only ever set to 1 */
                reached = 0;
            }
            c->out[r * c->trees + t] = reached;
        }
    }
}

/* With `weights` (leaves x targets, float32): each row's sum over the trees of its
 * reached leaves' weights, in tree order and in float32 (as numpy's add.reduce of the
 * gathered weights along the trees axis adds them), into scores (rows x targets). */
static void
score_rows(void *ctx, idx begin, idx end)
{
    TreeCall *c = (TreeCall *)ctx;
    for (idx r = begin; r < end; r++) {
        const double *row = c->x + r * c->features;
        float *out = c->scores + r * c->targets;
        for (idx j = 0; j < c->targets; j++) {
            out[j] = 0.0f;
        }
        for (idx t = 0; t < c->trees; t++) {
            const int64_t reached = walk_tree(c, row, t);
            if (reached < 0) {
                c->bad = 1;
                continue;
            }
            const float *w = c->weights + reached * c->targets;
            for (idx j = 0; j < c->targets; j++) {
                out[j] += w[j];
            }
        }
    }
}

/* A forest's node arrays (and, for scoring, its leaf weights) held once (tree_forest), so
 * that a call passes only its rows and the output (tree_run): acquiring the forest's
 * buffers on every call was most of a one-sample random forest's ~3 us. */
enum { F_ROOTS, F_FEATURE, F_SPLIT, F_MODE, F_TRUE_ID, F_TRUE_LEAF, F_FALSE_ID, F_FALSE_LEAF, F_MISSING,
       F_WEIGHTS, F_VIEWS };

typedef struct {
    Py_buffer v[F_VIEWS];
    idx trees, nodes, leaves, targets; /* targets 0: a walk forest (no weights) */
} Forest;

static const char FOREST_CAPSULE[] = "onyxrt.forest";

static void
forest_destroy(PyObject *capsule)
{
    Forest *f = (Forest *)PyCapsule_GetPointer(capsule, FOREST_CAPSULE);
    if (f != NULL) {
        release_all(f->v, F_VIEWS);
        PyMem_Free(f);
    }
}

/* tree_forest(roots, feature, split, mode, true_id, true_leaf, false_id, false_leaf,
 * missing_true, weights, leaves, targets) -> a capsule for tree_run: int64 node arrays,
 * uint8 flags; weights None (tree_run gives the leaves reached) or float32 (leaves,
 * targets) (tree_run gives the rows' summed leaf weights). */
PyObject *
py_tree_forest(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *o[F_VIEWS];
    idx leaves, targets;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOnn", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6], &o[7],
                          &o[8], &o[9], &leaves, &targets)) {
        return NULL;
    }
    const int scoring = o[F_WEIGHTS] != Py_None;
    if (leaves < 0 || (scoring && (leaves < 1 || targets < 1))) {
        PyErr_SetString(PyExc_ValueError, "tree_forest: weights need leaves >= 1 and targets >= 1");
        return NULL;
    }
    Forest *f = (Forest *)PyMem_Calloc(1, sizeof(Forest));
    if (f == NULL) {
        return PyErr_NoMemory();
    }
    int ok = get_bytes(o[F_FEATURE], &f->v[F_FEATURE], 0, 0, 8, "feature") == 0;
    const idx nodes = ok ? f->v[F_FEATURE].len / 8 : 0;
    ok = ok && get_bytes(o[F_ROOTS], &f->v[F_ROOTS], 0, 0, 8, "roots") == 0 &&
         get_bytes(o[F_SPLIT], &f->v[F_SPLIT], 0, nodes, 8, "split") == 0 &&
         get_bytes(o[F_MODE], &f->v[F_MODE], 0, nodes, 8, "mode") == 0 &&
         get_bytes(o[F_TRUE_ID], &f->v[F_TRUE_ID], 0, nodes, 8, "true_id") == 0 &&
         get_bytes(o[F_TRUE_LEAF], &f->v[F_TRUE_LEAF], 0, nodes, 1, "true_leaf") == 0 &&
         get_bytes(o[F_FALSE_ID], &f->v[F_FALSE_ID], 0, nodes, 8, "false_id") == 0 &&
         get_bytes(o[F_FALSE_LEAF], &f->v[F_FALSE_LEAF], 0, nodes, 1, "false_leaf") == 0 &&
         get_bytes(o[F_MISSING], &f->v[F_MISSING], 0, nodes, 1, "missing_true") == 0 &&
         (!scoring || get_f32(o[F_WEIGHTS], &f->v[F_WEIGHTS], 0, leaves * targets, "weights") == 0);
    if (!ok) {
        release_all(f->v, F_VIEWS);
        PyMem_Free(f);
        return NULL;
    }
    f->trees = f->v[F_ROOTS].len / 8;
    f->nodes = nodes;
    f->leaves = leaves;
    f->targets = scoring ? targets : 0;
    PyObject *capsule = PyCapsule_New(f, FOREST_CAPSULE, forest_destroy);
    if (capsule == NULL) {
        release_all(f->v, F_VIEWS);
        PyMem_Free(f);
    }
    return capsule;
}

/* tree_run(forest, x, out, n, features): x float32 or float64 (n, features) by its element
 * size, float32 rows widened to float64 for the comparisons; out int64 (n, trees), the
 * leaves reached, for a walk forest, float32 (n, targets), the summed leaf weights, for a
 * scoring one. */
PyObject *
py_tree_run(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *fo, *xo, *oo;
    idx n, features;
    if (!PyArg_ParseTuple(args, "OOOnn", &fo, &xo, &oo, &n, &features)) {
        return NULL;
    }
    Forest *f = (Forest *)PyCapsule_GetPointer(fo, FOREST_CAPSULE);
    if (f == NULL) {
        return NULL;
    }
    if (n < 0 || features < 1) {
        PyErr_SetString(PyExc_ValueError, "tree_run: bad dimensions");
        return NULL;
    }
    if (n == 0) {
        Py_RETURN_NONE;
    }
    const int scoring = f->targets > 0;
    enum { X, OUT, VIEWS };
    Py_buffer v[VIEWS];
    memset(v, 0, sizeof(v));
    if (PyObject_GetBuffer(xo, &v[X], PyBUF_C_CONTIGUOUS) < 0) {
        return NULL;
    }
    const idx size = v[X].len / (n * features);
    if ((size != 4 && size != 8) || v[X].len != n * features * size ||
        (scoring ? get_f32(oo, &v[OUT], 1, n * f->targets, "out")
                 : get_bytes(oo, &v[OUT], 1, n * f->trees, 8, "out")) < 0) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_ValueError, "tree_run: x must be float32 or float64 (n, features)");
        }
        release_all(v, VIEWS);
        return NULL;
    }
    double stack[256];
    double *wide = NULL;
    const double *x = (const double *)v[X].buf;
    if (size == 4) {
        wide = n * features <= 256 ? stack : (double *)PyMem_Malloc(sizeof(double) * (size_t)(n * features));
        if (wide == NULL) {
            release_all(v, VIEWS);
            return PyErr_NoMemory();
        }
        const float *xf = (const float *)v[X].buf;
        for (idx i = 0; i < n * features; i++) {
            wide[i] = xf[i];
        }
        x = wide;
    }
    TreeCall call = {x, n, features, f->trees, f->nodes, f->leaves,
                     (const int64_t *)f->v[F_ROOTS].buf, (const int64_t *)f->v[F_FEATURE].buf,
                     (const int64_t *)f->v[F_MODE].buf, (const int64_t *)f->v[F_TRUE_ID].buf,
                     (const int64_t *)f->v[F_FALSE_ID].buf, (const double *)f->v[F_SPLIT].buf,
                     (const uint8_t *)f->v[F_TRUE_LEAF].buf, (const uint8_t *)f->v[F_FALSE_LEAF].buf,
                     (const uint8_t *)f->v[F_MISSING].buf,
                     scoring ? NULL : (int64_t *)v[OUT].buf,
                     scoring ? (const float *)f->v[F_WEIGHTS].buf : NULL,
                     scoring ? (float *)v[OUT].buf : NULL, f->targets, 0};
    if (n < 4) {
        /* a sample or two: microseconds, not worth the pool's hand-off */
        (scoring ? score_rows : walk_rows)(&call, 0, n);
    } else {
        Py_BEGIN_ALLOW_THREADS
        /* A row is `trees` walks: a few hundred ns each. */
        parallel_for(scoring ? score_rows : walk_rows, &call, n, 1 + 4096 / (f->trees + 1));
        Py_END_ALLOW_THREADS
    }
    if (wide != NULL && wide != stack) {
        PyMem_Free(wide);
    }
    release_all(v, VIEWS);
    if (call.bad) {
        PyErr_SetString(PyExc_ValueError, "a tree walk left the nodes, looped, or ended outside the leaves");
        return NULL;
    }
    Py_RETURN_NONE;
}
