/* The compiled run path of a host plan: InferenceSession.run in one C call.
 *
 * A tiny model's run (a scikit-learn pipeline of five kernels) spent about half its
 * ~13 us in the Python around its kernels: resolving output names, checking each feed,
 * entering the run's limits, the memory guard and numpy's ignored floating-point errors,
 * copying the slot template, calling the steps, and the checks on what goes back. This
 * object does all of that for the usual call -- output names None or known, a dict of
 * numpy arrays of exactly the declared dtype and fixed dims -- and calls the kernels
 * themselves with vectorcall. Everything else goes to the session's Python path
 * (``slow(output_names, input_feed)``), which is the reference: a feed to convert or
 * reject, an unknown name, a failing step (the Python path runs again and raises its
 * typed error naming the node), or an output that is a view of memory no array of the
 * run's own owns (``outputs_of`` decides those with its memory extents). onyxrt_cpu.fast_run builds
 * it; see there for the contract of each argument.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_22_API_VERSION
#define NPY_TARGET_VERSION NPY_1_22_API_VERSION
#define PY_ARRAY_UNIQUE_SYMBOL onyxrt_fast_run_ARRAY_API
#include <numpy/arrayobject.h>

#include <stddef.h>

#include "native.h"

/* Steps with more inputs than this take their argument array from the heap. */
#define STACK_ARGS 16

typedef struct {
    Py_ssize_t slot;
    PyArray_Descr *dtype; /* NULL: every feed goes the Python way (text, containers) */
    int rank;             /* -1: any shape */
    int required;         /* a graph input (not an overridable initializer) */
    Py_ssize_t nfixed;
    Py_ssize_t *fixed;    /* nfixed (axis, size) pairs */
} InputSpec;

typedef struct {
    PyObject *fn;
    int single;           /* fn returns the one output itself, not a sequence */
    Py_ssize_t nins, nouts, nrel;
    Py_ssize_t *ins, *outs, *rel; /* one allocation: ins, then outs, then rel */
} StepSpec;

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    Py_ssize_t nslots;
    PyObject **template;  /* nslots strong references (None for empty slots) */
    PyObject *input_index; /* name -> index into inputs */
    Py_ssize_t ninputs, nrequired;
    InputSpec *inputs;
    Py_ssize_t nsteps;
    StepSpec *steps;
    PyObject *all_names;  /* list of every output name, in order */
    Py_ssize_t *all_slots;
    PyObject *output_index; /* name -> slot */
    char *protected_;     /* per slot: never hand out the value itself */
    uintptr_t *template_roots; /* the arrays owning the template's memory, sorted */
    Py_ssize_t nroots;
    PyObject *limits_var, *limits; /* onyxrt.limits' current limits */
    PyObject *guard_var;  /* NULL: no memory guard */
    unsigned long long max_tensor, max_run;
    PyObject *extobj_var; /* numpy's floating-point error state */
    PyObject *float_errors; /* onyxrt.float_errors' namespace (its _pair, its functions) */
    PyObject *thread_limit; /* None, or thread_limit() -> a context manager per run */
    PyObject *plan;       /* the plan, and the step list built from (stale when it changes) */
    PyObject *source;
    PyObject *slow;       /* slow(output_names, input_feed) */
    PyObject *outputs_of; /* outputs_of(vals, feeds, names) */
} FastRun;

static PyTypeObject FastRunType;
static int numpy_api = 0; /* numpy's C API imported: fast_run can be built */

static void
free_specs(FastRun *r)
{
    if (r->template != NULL) {
        for (Py_ssize_t i = 0; i < r->nslots; i++) {
            Py_XDECREF(r->template[i]);
        }
        PyMem_Free(r->template);
        r->template = NULL;
    }
    if (r->inputs != NULL) {
        for (Py_ssize_t i = 0; i < r->ninputs; i++) {
            Py_XDECREF(r->inputs[i].dtype);
            PyMem_Free(r->inputs[i].fixed);
        }
        PyMem_Free(r->inputs);
        r->inputs = NULL;
    }
    if (r->steps != NULL) {
        for (Py_ssize_t i = 0; i < r->nsteps; i++) {
            Py_XDECREF(r->steps[i].fn);
            PyMem_Free(r->steps[i].ins);
        }
        PyMem_Free(r->steps);
        r->steps = NULL;
    }
    PyMem_Free(r->all_slots);
    r->all_slots = NULL;
    PyMem_Free(r->protected_);
    r->protected_ = NULL;
    PyMem_Free(r->template_roots);
    r->template_roots = NULL;
}

/* The array owning v's memory (v itself, or the end of its chain of bases), or NULL when
 * no array owns it (a buffer of another object, an array without a base). Borrowed. */
static PyObject *
root_of(PyObject *v)
{
    while (PyArray_Check(v)) {
        PyArrayObject *a = (PyArrayObject *)v;
        if (PyArray_CHKFLAGS(a, NPY_ARRAY_OWNDATA)) {
            return v;
        }
        v = PyArray_BASE(a);
        if (v == NULL) {
            return NULL;
        }
    }
    return NULL;
}

static int
compare_roots(const void *a, const void *b)
{
    const uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
    return x < y ? -1 : x > y;
}

/* The owners of the template's arrays (initializers, constants), sorted for bsearch. */
static int
read_template_roots(FastRun *r)
{
    r->template_roots = PyMem_Malloc(sizeof(uintptr_t) * (r->nslots ? r->nslots : 1));
    if (r->template_roots == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < r->nslots; i++) {
        PyObject *root = root_of(r->template[i]);
        if (root != NULL) {
            r->template_roots[r->nroots++] = (uintptr_t)root;
        }
    }
    qsort(r->template_roots, r->nroots, sizeof(uintptr_t), compare_roots);
    return 0;
}

/* Whether a view (v, not owning its memory) is the run's own: its memory belongs to an
 * array that owns it and is neither a feed's owner nor a template value's. Two arrays
 * that own their memory own separate allocations, so such a view overlaps no feed and
 * no initializer, as plan._outputs_of's extents would find; anything else is decided
 * there. */
static int
view_is_own(FastRun *r, PyObject *v, PyObject *feed)
{
    PyObject *root = root_of(v);
    if (root == NULL) {
        return 0;
    }
    uintptr_t key = (uintptr_t)root;
    if (bsearch(&key, r->template_roots, r->nroots, sizeof(uintptr_t), compare_roots) != NULL) {
        return 0;
    }
    Py_ssize_t pos = 0;
    PyObject *name, *fed;
    while (PyDict_Next(feed, &pos, &name, &fed)) {
        PyObject *fed_root = root_of(fed);
        if (fed_root == NULL || fed_root == root) {
            return 0;
        }
    }
    return 1;
}

static int
fast_run_traverse(FastRun *r, visitproc visit, void *arg)
{
    if (r->template != NULL) {
        for (Py_ssize_t i = 0; i < r->nslots; i++) {
            Py_VISIT(r->template[i]);
        }
    }
    if (r->steps != NULL) {
        for (Py_ssize_t i = 0; i < r->nsteps; i++) {
            Py_VISIT(r->steps[i].fn);
        }
    }
    Py_VISIT(r->input_index);
    Py_VISIT(r->all_names);
    Py_VISIT(r->output_index);
    Py_VISIT(r->limits_var);
    Py_VISIT(r->limits);
    Py_VISIT(r->guard_var);
    Py_VISIT(r->extobj_var);
    Py_VISIT(r->float_errors);
    Py_VISIT(r->thread_limit);
    Py_VISIT(r->plan);
    Py_VISIT(r->source);
    Py_VISIT(r->slow);
    Py_VISIT(r->outputs_of);
    return 0;
}

static int
fast_run_clear(FastRun *r)
{
    free_specs(r);
    Py_CLEAR(r->input_index);
    Py_CLEAR(r->all_names);
    Py_CLEAR(r->output_index);
    Py_CLEAR(r->limits_var);
    Py_CLEAR(r->limits);
    Py_CLEAR(r->guard_var);
    Py_CLEAR(r->extobj_var);
    Py_CLEAR(r->float_errors);
    Py_CLEAR(r->thread_limit);
    Py_CLEAR(r->plan);
    Py_CLEAR(r->source);
    Py_CLEAR(r->slow);
    Py_CLEAR(r->outputs_of);
    return 0;
}

static void
fast_run_dealloc(FastRun *r)
{
    PyObject_GC_UnTrack(r);
    fast_run_clear(r);
    Py_TYPE(r)->tp_free((PyObject *)r);
}

/* A tuple of ints as a C array (appended at *out); -1 with an exception. */
static int
slots_of(PyObject *seq, Py_ssize_t nslots, Py_ssize_t *out, Py_ssize_t n)
{
    for (Py_ssize_t k = 0; k < n; k++) {
        Py_ssize_t v = PyLong_AsSsize_t(PyTuple_GET_ITEM(seq, k));
        if (v == -1 && PyErr_Occurred()) {
            return -1;
        }
        if (v < 0 || v >= nslots) {
            PyErr_Format(PyExc_ValueError, "fast_run: slot %zd out of range", v);
            return -1;
        }
        out[k] = v;
    }
    return 0;
}

static int
read_inputs(FastRun *r, PyObject *inputs)
{
    r->ninputs = PyList_GET_SIZE(inputs);
    r->inputs = PyMem_Calloc(r->ninputs ? r->ninputs : 1, sizeof(InputSpec));
    r->input_index = PyDict_New();
    if (r->inputs == NULL || r->input_index == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < r->ninputs; i++) {
        PyObject *name, *dtype, *fixed;
        Py_ssize_t slot;
        int rank, required;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(inputs, i), "UnOiO!p", &name, &slot, &dtype, &rank,
                              &PyTuple_Type, &fixed, &required)) {
            return -1;
        }
        InputSpec *in = &r->inputs[i];
        if (slot < 0 || slot >= r->nslots) {
            PyErr_SetString(PyExc_ValueError, "fast_run: input slot out of range");
            return -1;
        }
        in->slot = slot;
        in->rank = rank;
        in->required = required;
        r->nrequired += required;
        if (dtype != Py_None) {
            if (!PyArray_DescrCheck(dtype)) {
                PyErr_SetString(PyExc_TypeError, "fast_run: an input's dtype must be a numpy dtype or None");
                return -1;
            }
            Py_INCREF(dtype);
            in->dtype = (PyArray_Descr *)dtype;
        }
        in->nfixed = PyTuple_GET_SIZE(fixed);
        in->fixed = PyMem_Malloc(sizeof(Py_ssize_t) * 2 * (in->nfixed ? in->nfixed : 1));
        if (in->fixed == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        for (Py_ssize_t k = 0; k < in->nfixed; k++) {
            if (!PyArg_ParseTuple(PyTuple_GET_ITEM(fixed, k), "nn", &in->fixed[2 * k], &in->fixed[2 * k + 1])) {
                return -1;
            }
            if (in->fixed[2 * k] < 0 || in->fixed[2 * k] >= rank) {
                PyErr_SetString(PyExc_ValueError, "fast_run: a fixed axis outside the input's rank");
                return -1;
            }
        }
        PyObject *index = PyLong_FromSsize_t(i);
        if (index == NULL || PyDict_SetItem(r->input_index, name, index) < 0) {
            Py_XDECREF(index);
            return -1;
        }
        Py_DECREF(index);
    }
    return 0;
}

static int
read_steps(FastRun *r, PyObject *steps)
{
    r->nsteps = PyList_GET_SIZE(steps);
    r->steps = PyMem_Calloc(r->nsteps ? r->nsteps : 1, sizeof(StepSpec));
    if (r->steps == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < r->nsteps; i++) {
        PyObject *fn, *ins, *outs, *rel, *single;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(steps, i), "OO!O!O!O", &fn, &PyTuple_Type, &ins,
                              &PyTuple_Type, &outs, &PyTuple_Type, &rel, &single)) {
            return -1;
        }
        StepSpec *s = &r->steps[i];
        s->single = single != Py_None && PyTuple_GET_SIZE(outs) == 1;
        s->fn = s->single ? single : fn;
        if (!PyCallable_Check(s->fn)) {
            PyErr_SetString(PyExc_TypeError, "fast_run: a step's kernel is not callable");
            return -1;
        }
        Py_INCREF(s->fn);
        s->nins = PyTuple_GET_SIZE(ins);
        s->nouts = PyTuple_GET_SIZE(outs);
        s->nrel = PyTuple_GET_SIZE(rel);
        s->ins = PyMem_Malloc(sizeof(Py_ssize_t) * (s->nins + s->nouts + s->nrel + 1));
        if (s->ins == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        s->outs = s->ins + s->nins;
        s->rel = s->outs + s->nouts;
        if (slots_of(ins, r->nslots, s->ins, s->nins) < 0 || slots_of(outs, r->nslots, s->outs, s->nouts) < 0 ||
            slots_of(rel, r->nslots, s->rel, s->nrel) < 0) {
            return -1;
        }
    }
    return 0;
}

static int
read_outputs(FastRun *r, PyObject *names, PyObject *slots, PyObject *protected_)
{
    Py_ssize_t n = PyList_GET_SIZE(names);
    if (PyTuple_GET_SIZE(slots) != n) {
        PyErr_SetString(PyExc_ValueError, "fast_run: one slot per output name");
        return -1;
    }
    r->all_slots = PyMem_Malloc(sizeof(Py_ssize_t) * (n ? n : 1));
    r->protected_ = PyMem_Calloc(r->nslots, 1);
    r->output_index = PyDict_New();
    if (r->all_slots == NULL || r->protected_ == NULL || r->output_index == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    if (slots_of(slots, r->nslots, r->all_slots, n) < 0) {
        return -1;
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        if (PyDict_SetItem(r->output_index, PyList_GET_ITEM(names, k), PyTuple_GET_ITEM(slots, k)) < 0) {
            return -1;
        }
    }
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(protected_); k++) {
        Py_ssize_t slot = PyLong_AsSsize_t(PyTuple_GET_ITEM(protected_, k));
        if (slot == -1 && PyErr_Occurred()) {
            return -1;
        }
        if (slot >= 0 && slot < r->nslots) {
            r->protected_[slot] = 1;
        }
    }
    Py_INCREF(names);
    r->all_names = names;
    return 0;
}

/* What a run entered, to leave in reverse. */
typedef struct {
    PyObject *thread_ctx;  /* the thread limit's context manager, entered */
    PyObject *guard_token; /* guard_begin's token */
    PyObject *guard_var_token, *limits_token, *float_token;
    PyObject *python_float_token; /* ignore_float_errors()'s token, when C could not */
} Entered;

static void leave(FastRun *r, Entered *e);

static int
enter(FastRun *r, Entered *e)
{
    memset(e, 0, sizeof(*e));
    if (r->thread_limit != Py_None) {
        PyObject *ctx = PyObject_CallNoArgs(r->thread_limit);
        if (ctx == NULL) {
            return -1;
        }
        PyObject *res = PyObject_CallMethod(ctx, "__enter__", NULL);
        if (res == NULL) {
            Py_DECREF(ctx);
            return -1;
        }
        Py_DECREF(res);
        e->thread_ctx = ctx;
    }
    if (r->guard_var != NULL) {
        e->guard_token = guard_begin(r->max_tensor, r->max_run);
        if (e->guard_token == NULL) {
            goto fail;
        }
        e->guard_var_token = PyContextVar_Set(r->guard_var, e->guard_token);
        if (e->guard_var_token == NULL) {
            goto fail;
        }
    }
    e->limits_token = PyContextVar_Set(r->limits_var, r->limits);
    if (e->limits_token == NULL) {
        goto fail;
    }
    /* onyxrt.float_errors.ignore_float_errors, as it does it: _pair holds (the state it
     * last saw, that state with every error ignored). */
    PyObject *pair = PyDict_GetItemString(r->float_errors, "_pair"); /* borrowed */
    PyObject *current = NULL;
    if (PyContextVar_Get(r->extobj_var, NULL, &current) < 0) {
        goto fail;
    }
    if (pair != NULL && PyTuple_Check(pair) && PyTuple_GET_SIZE(pair) == 2 && current != NULL &&
        (current == PyTuple_GET_ITEM(pair, 0) || current == PyTuple_GET_ITEM(pair, 1))) {
        if (current == PyTuple_GET_ITEM(pair, 0)) {
            e->float_token = PyContextVar_Set(r->extobj_var, PyTuple_GET_ITEM(pair, 1));
            if (e->float_token == NULL) {
                Py_DECREF(current);
                goto fail;
            }
        }
        Py_DECREF(current);
    }
    else {
        Py_XDECREF(current);
        PyObject *ignore = PyDict_GetItemString(r->float_errors, "ignore_float_errors");
        if (ignore == NULL) {
            PyErr_SetString(PyExc_RuntimeError, "fast_run: onyxrt.float_errors has no ignore_float_errors");
            goto fail;
        }
        e->python_float_token = PyObject_CallNoArgs(ignore);
        if (e->python_float_token == NULL) {
            goto fail;
        }
    }
    return 0;
fail:
    leave(r, e);
    return -1;
}

/* Leave what enter() entered; keeps an exception already set (a later one is written
 * as unraisable). */
static void
leave(FastRun *r, Entered *e)
{
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    if (e->python_float_token != NULL) {
        PyObject *restore = PyDict_GetItemString(r->float_errors, "restore_float_errors");
        PyObject *res = restore != NULL ? PyObject_CallOneArg(restore, e->python_float_token) : NULL;
        if (res == NULL) {
            PyErr_WriteUnraisable((PyObject *)r);
        }
        Py_XDECREF(res);
        Py_CLEAR(e->python_float_token);
    }
    if (e->float_token != NULL) {
        if (PyContextVar_Reset(r->extobj_var, e->float_token) < 0) {
            PyErr_WriteUnraisable((PyObject *)r);
        }
        Py_CLEAR(e->float_token);
    }
    if (e->limits_token != NULL) {
        if (PyContextVar_Reset(r->limits_var, e->limits_token) < 0) {
            PyErr_WriteUnraisable((PyObject *)r);
        }
        Py_CLEAR(e->limits_token);
    }
    if (e->guard_var_token != NULL) {
        if (PyContextVar_Reset(r->guard_var, e->guard_var_token) < 0) {
            PyErr_WriteUnraisable((PyObject *)r);
        }
        Py_CLEAR(e->guard_var_token);
    }
    if (e->guard_token != NULL) {
        if (guard_end(e->guard_token) < 0) {
            PyErr_WriteUnraisable((PyObject *)r);
        }
        Py_CLEAR(e->guard_token);
    }
    if (e->thread_ctx != NULL) {
        PyObject *res = PyObject_CallMethod(e->thread_ctx, "__exit__", "OOO", Py_None, Py_None, Py_None);
        if (res == NULL) {
            PyErr_WriteUnraisable((PyObject *)r);
        }
        Py_XDECREF(res);
        Py_CLEAR(e->thread_ctx);
    }
    PyErr_Restore(type, value, traceback);
}

static void
drop_values(PyObject **vals, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_XDECREF(vals[i]);
    }
    PyMem_Free(vals);
}

/* Whether the plan's steps changed since this was built (plan.finalize() again): 1, 0, or
 * -1 with an exception set. */
static int
is_stale(FastRun *r)
{
    PyObject *compiled = PyObject_GetAttrString(r->plan, "_compiled");
    if (compiled == NULL) {
        return -1;
    }
    Py_DECREF(compiled); /* only its identity matters: the plan still holds it */
    return compiled != r->source;
}

static PyObject *
go_slow(FastRun *r, PyObject *output_names, PyObject *feed)
{
    PyObject *args[2] = {output_names, feed};
    return PyObject_Vectorcall(r->slow, args, 2, NULL);
}

/* Whether `feed` holds exactly the arrays the Python checks take as they are, every
 * required input among them; their values written into vals. */
static int
place_feeds(FastRun *r, PyObject *feed, PyObject **vals)
{
    Py_ssize_t pos = 0, required = 0;
    PyObject *name, *value;
    while (PyDict_Next(feed, &pos, &name, &value)) {
        if (!PyUnicode_CheckExact(name)) {
            return 0;
        }
        PyObject *index = PyDict_GetItemWithError(r->input_index, name); /* borrowed */
        if (index == NULL) {
            PyErr_Clear();
            return 0;
        }
        const InputSpec *in = &r->inputs[PyLong_AsSsize_t(index)];
        if (in->dtype == NULL || !PyArray_CheckExact(value)) {
            return 0;
        }
        PyArrayObject *a = (PyArrayObject *)value;
        if (!PyArray_EquivTypes(PyArray_DESCR(a), in->dtype)) {
            return 0;
        }
        if (in->rank >= 0) {
            if (PyArray_NDIM(a) != in->rank) {
                return 0;
            }
            const npy_intp *dims = PyArray_DIMS(a);
            for (Py_ssize_t k = 0; k < in->nfixed; k++) {
                if (dims[in->fixed[2 * k]] != in->fixed[2 * k + 1]) {
                    return 0;
                }
            }
        }
        Py_INCREF(value);
        Py_XSETREF(vals[in->slot], value);
        required += in->required;
    }
    return required == r->nrequired;
}

/* Run the steps over vals: 0, or -1 with the step's exception set (or a sequence of the
 * wrong length, reported as -2 with no exception). */
static int
run_steps(FastRun *r, PyObject **vals)
{
    PyObject *stack[STACK_ARGS];
    for (Py_ssize_t i = 0; i < r->nsteps; i++) {
        const StepSpec *s = &r->steps[i];
        PyObject **args = stack;
        if (s->nins > STACK_ARGS) {
            args = PyMem_Malloc(sizeof(PyObject *) * s->nins);
            if (args == NULL) {
                PyErr_NoMemory();
                return -1;
            }
        }
        for (Py_ssize_t k = 0; k < s->nins; k++) {
            args[k] = vals[s->ins[k]];
        }
        PyObject *res = PyObject_Vectorcall(s->fn, args, s->nins, NULL);
        if (args != stack) {
            PyMem_Free(args);
        }
        if (res == NULL) {
            return -1;
        }
        if (s->single) {
            Py_XSETREF(vals[s->outs[0]], res);
        }
        else {
            if (!(PyTuple_CheckExact(res) || PyList_CheckExact(res))) {
                /* another sequence (a named tuple): as the Python loop reads it, by its
                 * length and items; anything without a length is the Python path's error */
                Py_ssize_t size = PySequence_Check(res) ? PySequence_Size(res) : -1;
                PyObject *items = size >= s->nouts ? PySequence_Fast(res, "") : NULL;
                Py_DECREF(res);
                if (items == NULL) {
                    PyErr_Clear();
                    return -2;
                }
                res = items;
            }
            if (PySequence_Fast_GET_SIZE(res) < s->nouts) {
                Py_DECREF(res);
                return -2; /* the Python path says what is wrong with it */
            }
            PyObject **items = PySequence_Fast_ITEMS(res);
            for (Py_ssize_t k = 0; k < s->nouts; k++) {
                Py_INCREF(items[k]);
                Py_XSETREF(vals[s->outs[k]], items[k]);
            }
            Py_DECREF(res);
        }
        for (Py_ssize_t k = 0; k < s->nrel; k++) {
            Py_INCREF(Py_None);
            Py_XSETREF(vals[s->rel[k]], Py_None);
        }
    }
    return 0;
}

/* The requested outputs as the caller gets them, or NULL with no exception where the
 * Python rules must decide (a view of memory the output does not own). */
static PyObject *
hand_out(FastRun *r, PyObject **vals, const Py_ssize_t *slots, Py_ssize_t n, PyObject *feed)
{
    PyObject *results = PyList_New(n);
    if (results == NULL) {
        return NULL;
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        Py_ssize_t slot = slots[k];
        PyObject *v = vals[slot];
        PyObject *out;
        if (PyArray_IsScalar(v, Generic)) {
            out = PyArray_FromScalar(v, NULL);
        }
        else if (PyArray_Check(v)) {
            PyArrayObject *a = (PyArrayObject *)v;
            int copy = r->protected_[slot] || !PyArray_ISWRITEABLE(a);
            if (!copy) {
                Py_ssize_t pos = 0;
                PyObject *name, *fed;
                while (PyDict_Next(feed, &pos, &name, &fed)) {
                    if (fed == v) {
                        copy = 1;
                        break;
                    }
                }
            }
            if (!copy && !PyArray_CHKFLAGS(a, NPY_ARRAY_OWNDATA) && !view_is_own(r, v, feed)) {
                Py_DECREF(results);
                return NULL;
            }
            for (Py_ssize_t j = 0; j < k && !copy; j++) {
                copy = PyList_GET_ITEM(results, j) == v;
            }
            out = copy ? PyArray_NewCopy(a, NPY_CORDER) : (Py_INCREF(v), v);
        }
        else {
            for (Py_ssize_t j = 0; j < k; j++) {
                if (PyList_GET_ITEM(results, j) == v) { /* the same container twice */
                    Py_DECREF(results);
                    return NULL;
                }
            }
            Py_INCREF(v);
            out = v;
        }
        if (out == NULL) {
            Py_DECREF(results);
            return NULL;
        }
        PyList_SET_ITEM(results, k, out);
    }
    return results;
}

static PyObject *
fast_run_call(FastRun *r, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs != 2 || kwnames != NULL) {
        PyErr_SetString(PyExc_TypeError, "fast_run(output_names, input_feed)");
        return NULL;
    }
    PyObject *output_names = args[0], *feed = args[1];
    if (!PyDict_CheckExact(feed)) {
        return go_slow(r, output_names, feed);
    }
    const int changed = is_stale(r);
    if (changed < 0) {
        return NULL;
    }
    if (changed) {
        return go_slow(r, output_names, feed); /* the plan's steps changed since */
    }
    /* the outputs' slots */
    Py_ssize_t n;
    Py_ssize_t small[8];
    Py_ssize_t *slots = r->all_slots;
    PyObject *names = r->all_names;
    if (output_names == Py_None || ((PyList_CheckExact(output_names) || PyTuple_CheckExact(output_names)) &&
                                    PySequence_Fast_GET_SIZE(output_names) == 0)) {
        n = PyList_GET_SIZE(r->all_names);
    }
    else if (PyList_CheckExact(output_names) || PyTuple_CheckExact(output_names)) {
        n = PySequence_Fast_GET_SIZE(output_names);
        slots = n <= 8 ? small : PyMem_Malloc(sizeof(Py_ssize_t) * n);
        if (slots == NULL) {
            return PyErr_NoMemory();
        }
        PyObject **items = PySequence_Fast_ITEMS(output_names);
        for (Py_ssize_t k = 0; k < n; k++) {
            PyObject *slot = PyUnicode_CheckExact(items[k]) ? PyDict_GetItemWithError(r->output_index, items[k]) : NULL;
            if (slot == NULL) {
                PyErr_Clear();
                if (slots != small) {
                    PyMem_Free(slots);
                }
                return go_slow(r, output_names, feed);
            }
            slots[k] = PyLong_AsSsize_t(slot);
        }
        names = NULL; /* made from output_names if the Python rules need it */
    }
    else {
        return go_slow(r, output_names, feed);
    }
    PyObject *result = NULL;
    PyObject **vals = PyMem_Malloc(sizeof(PyObject *) * r->nslots);
    if (vals == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < r->nslots; i++) {
        Py_INCREF(r->template[i]);
        vals[i] = r->template[i];
    }
    if (!place_feeds(r, feed, vals)) {
        drop_values(vals, r->nslots);
        result = go_slow(r, output_names, feed);
        goto done;
    }
    Entered entered;
    if (enter(r, &entered) < 0) {
        drop_values(vals, r->nslots);
        goto done;
    }
    int status = run_steps(r, vals);
    leave(r, &entered);
    if (status < 0) {
        drop_values(vals, r->nslots);
        if (status == -1 && !PyErr_ExceptionMatches(PyExc_Exception)) {
            goto done; /* an interrupt or exit passes as it is */
        }
        /* The Python path runs the plan again and raises its typed error naming the
         * node (kernels are pure: the same inputs fail the same way). */
        PyErr_Clear();
        result = go_slow(r, output_names, feed);
        goto done;
    }
    result = hand_out(r, vals, slots, n, feed);
    if (result == NULL && !PyErr_Occurred()) {
        PyObject *list = PyList_New(r->nslots);
        if (list != NULL) {
            for (Py_ssize_t i = 0; i < r->nslots; i++) {
                Py_INCREF(vals[i]);
                PyList_SET_ITEM(list, i, vals[i]);
            }
            PyObject *name_list = names != NULL ? (Py_INCREF(names), names) : PySequence_List(output_names);
            if (name_list != NULL) {
                PyObject *call[3] = {list, feed, name_list};
                result = PyObject_Vectorcall(r->outputs_of, call, 3, NULL);
                Py_DECREF(name_list);
            }
            Py_DECREF(list);
        }
    }
    drop_values(vals, r->nslots);
done:
    if (slots != small && slots != r->all_slots) {
        PyMem_Free(slots);
    }
    return result;
}

/* fast_run(plan, compiled, template, inputs, steps, output_names, output_slots, protected,
 *          limits_var, limits, guard_var, max_tensor, max_run, extobj_var, float_errors,
 *          thread_limit, slow, outputs_of) */
PyObject *
py_fast_run(PyObject *self, PyObject *args)
{
    PyObject *plan, *compiled, *template, *inputs, *steps, *names, *slots, *protected_, *limits_var, *limits;
    PyObject *guard_var, *extobj_var, *float_errors, *thread_limit, *slow, *outputs_of;
    unsigned long long max_tensor, max_run;
    if (!numpy_api) {
        PyErr_SetString(PyExc_RuntimeError, "fast_run: numpy's C API is not available");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "OOO!O!O!O!O!O!OOOKKOO!OOO", &plan, &compiled, &PyList_Type, &template,
                          &PyList_Type, &inputs, &PyList_Type, &steps, &PyList_Type, &names, &PyTuple_Type,
                          &slots, &PyTuple_Type, &protected_, &limits_var, &limits, &guard_var, &max_tensor,
                          &max_run, &extobj_var, &PyDict_Type, &float_errors, &thread_limit, &slow,
                          &outputs_of)) {
        return NULL;
    }
    if (!PyContextVar_CheckExact(limits_var) || !PyContextVar_CheckExact(extobj_var) ||
        (guard_var != Py_None && !PyContextVar_CheckExact(guard_var))) {
        PyErr_SetString(PyExc_TypeError, "fast_run: the limits, guard and error-state variables must be ContextVars");
        return NULL;
    }
    FastRun *r = PyObject_GC_New(FastRun, &FastRunType);
    if (r == NULL) {
        return NULL;
    }
    memset((char *)r + sizeof(PyObject), 0, sizeof(FastRun) - sizeof(PyObject));
    r->vectorcall = (vectorcallfunc)fast_run_call;
    r->nslots = PyList_GET_SIZE(template);
    r->template = PyMem_Calloc(r->nslots ? r->nslots : 1, sizeof(PyObject *));
    if (r->template == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    for (Py_ssize_t i = 0; i < r->nslots; i++) {
        PyObject *v = PyList_GET_ITEM(template, i);
        Py_INCREF(v);
        r->template[i] = v;
    }
    if (read_inputs(r, inputs) < 0 || read_steps(r, steps) < 0 || read_outputs(r, names, slots, protected_) < 0 ||
        read_template_roots(r) < 0) {
        goto fail;
    }
    r->plan = (Py_INCREF(plan), plan);
    r->source = (Py_INCREF(compiled), compiled);
    r->limits_var = (Py_INCREF(limits_var), limits_var);
    r->limits = (Py_INCREF(limits), limits);
    r->guard_var = guard_var == Py_None ? NULL : (Py_INCREF(guard_var), guard_var);
    r->max_tensor = max_tensor;
    r->max_run = max_run;
    r->extobj_var = (Py_INCREF(extobj_var), extobj_var);
    r->float_errors = (Py_INCREF(float_errors), float_errors);
    r->thread_limit = (Py_INCREF(thread_limit), thread_limit);
    r->slow = (Py_INCREF(slow), slow);
    r->outputs_of = (Py_INCREF(outputs_of), outputs_of);
    PyObject_GC_Track(r);
    return (PyObject *)r;
fail:
    PyObject_GC_Track(r);
    Py_DECREF(r);
    return NULL;
}

static PyObject *
fast_run_stale(FastRun *r, PyObject *unused)
{
    const int changed = is_stale(r);
    return changed < 0 ? NULL : PyBool_FromLong(changed);
}

static PyMethodDef fast_run_methods[] = {
    {"stale", (PyCFunction)fast_run_stale, METH_NOARGS,
     "stale() -> whether the plan's steps changed since this was built (calls then go the Python way)."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject FastRunType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "onyxrt_cpu._native.FastRun",
    .tp_basicsize = sizeof(FastRun),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "A host plan's run in one call: fast_run(output_names, input_feed) -> outputs.",
    .tp_dealloc = (destructor)fast_run_dealloc,
    .tp_traverse = (traverseproc)fast_run_traverse,
    .tp_clear = (inquiry)fast_run_clear,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(FastRun, vectorcall),
    .tp_methods = fast_run_methods,
};

int
fast_run_init(PyObject *module)
{
    if (_import_array() < 0) {
        PyErr_Clear();
        return 0; /* no numpy C API: no fast path (the Python one serves) */
    }
    if (PyType_Ready(&FastRunType) < 0) {
        return -1;
    }
    numpy_api = 1;
    return 0;
}
