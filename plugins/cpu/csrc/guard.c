/* The memory guard: a numpy allocator (NEP 49) that enforces a run's memory limits.
 *
 * Every numpy array created while a guard is active -- outputs, intermediates and
 * temporaries of every kernel, sequences grown in a Loop -- is allocated here. A request
 * larger than the per-tensor limit, or one that would take the bytes live under this
 * guard past the per-run budget, fails *before* any memory is touched: malloc returns
 * NULL, numpy raises MemoryError, and the core turns that into ResourceLimitExceeded
 * naming the node (see onyxrt.limits). One place for every kernel, instead of a check
 * in each kernel that can grow a tensor.
 *
 * Each run gets its own guard (its own counters): numpy keeps a reference to the
 * handler capsule in every array it allocated, so frees after the run (an output the
 * caller drops later) still find the guard; the capsule's destructor frees it when the
 * last such array is gone. The guard is disarmed when the run ends, so what the caller
 * does with the outputs is never limited.
 *
 * Each block carries a 16-byte header with its size (numpy passes sizes to free, but
 * realloc needs the old size too). Large blocks get transparent huge pages, as numpy's
 * default allocator gives them.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_22_API_VERSION
#define NPY_TARGET_VERSION NPY_1_22_API_VERSION
#define PY_ARRAY_UNIQUE_SYMBOL onyxrt_guard_ARRAY_API
#include <numpy/arrayobject.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef __linux__
#include <sys/mman.h>
#endif

#include "native.h"

#define HEADER 16
#define HUGE_PAGE_THRESHOLD (4u << 20)

typedef struct {
    PyDataMem_Handler handler; /* handler.allocator.ctx points back at this struct */
    size_t max_tensor;         /* 0: no limit */
    size_t max_run;            /* 0: no limit */
    size_t live;               /* bytes allocated under this guard and not freed (atomic) */
    size_t peak;               /* the most live at once (atomic, approximate under races) */
    int armed;                 /* atomic: limits enforced while the run lasts */
    /* The last refusal: 1 = per-tensor limit, 2 = per-run budget; bytes asked, live then. */
    int refused_kind;
    size_t refused_bytes;
    size_t refused_live;
} Guard;

static int numpy_ready = 0;

static void
refuse(Guard *g, int kind, size_t size, size_t live)
{
    g->refused_kind = kind;
    g->refused_bytes = size;
    g->refused_live = live;
}

/* Count `size` new bytes; 0 when a limit refuses them. */
static int
admit(Guard *g, size_t size)
{
    if (__atomic_load_n(&g->armed, __ATOMIC_RELAXED)) {
        if (g->max_tensor && size > g->max_tensor) {
            refuse(g, 1, size, __atomic_load_n(&g->live, __ATOMIC_RELAXED));
            return 0;
        }
        size_t live = __atomic_add_fetch(&g->live, size, __ATOMIC_RELAXED);
        if (g->max_run && live > g->max_run) {
            __atomic_sub_fetch(&g->live, size, __ATOMIC_RELAXED);
            refuse(g, 2, size, live - size);
            return 0;
        }
        if (live > __atomic_load_n(&g->peak, __ATOMIC_RELAXED)) {
            __atomic_store_n(&g->peak, live, __ATOMIC_RELAXED);
        }
        return 1;
    }
    __atomic_add_fetch(&g->live, size, __ATOMIC_RELAXED);
    return 1;
}

static void *
finish(void *block, size_t size)
{
    *(size_t *)block = size;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (size >= HUGE_PAGE_THRESHOLD) {
        uintptr_t start = ((uintptr_t)block + 4095) & ~(uintptr_t)4095;
        uintptr_t end = ((uintptr_t)block + HEADER + size) & ~(uintptr_t)4095;
        if (end > start) {
            madvise((void *)start, end - start, MADV_HUGEPAGE);
        }
    }
#endif
    return (char *)block + HEADER;
}

static void *
guard_malloc(void *ctx, size_t size)
{
    Guard *g = (Guard *)ctx;
    if (size > SIZE_MAX - HEADER || !admit(g, size)) {
        return NULL;
    }
    void *block = malloc(size + HEADER);
    if (block == NULL) {
        __atomic_sub_fetch(&g->live, size, __ATOMIC_RELAXED);
        return NULL;
    }
    return finish(block, size);
}

static void *
guard_calloc(void *ctx, size_t nelem, size_t elsize)
{
    Guard *g = (Guard *)ctx;
    if (elsize && nelem > (SIZE_MAX - HEADER) / elsize) {
        return NULL;
    }
    size_t size = nelem * elsize;
    if (!admit(g, size)) {
        return NULL;
    }
    void *block = calloc(1, size + HEADER);
    if (block == NULL) {
        __atomic_sub_fetch(&g->live, size, __ATOMIC_RELAXED);
        return NULL;
    }
    return finish(block, size);
}

static void
guard_free(void *ctx, void *ptr, size_t unused)
{
    (void)unused; /* the header's size is the truth (numpy's can differ after realloc) */
    if (ptr == NULL) {
        return;
    }
    Guard *g = (Guard *)ctx;
    void *block = (char *)ptr - HEADER;
    __atomic_sub_fetch(&g->live, *(size_t *)block, __ATOMIC_RELAXED);
    free(block);
}

static void *
guard_realloc(void *ctx, void *ptr, size_t size)
{
    if (ptr == NULL) {
        return guard_malloc(ctx, size);
    }
    Guard *g = (Guard *)ctx;
    void *block = (char *)ptr - HEADER;
    size_t old = *(size_t *)block;
    if (size > SIZE_MAX - HEADER) {
        return NULL;
    }
    if (size > old && !admit(g, size - old)) {
        return NULL;
    }
    void *grown = realloc(block, size + HEADER);
    if (grown == NULL) {
        if (size > old) {
            __atomic_sub_fetch(&g->live, size - old, __ATOMIC_RELAXED);
        }
        return NULL;
    }
    if (size < old) {
        __atomic_sub_fetch(&g->live, old - size, __ATOMIC_RELAXED);
    }
    *(size_t *)grown = size;
    return (char *)grown + HEADER;
}

static void
guard_destroy(PyObject *capsule)
{
    free(PyCapsule_GetPointer(capsule, "mem_handler"));
}

int
guard_init(void)
{
    /* numpy's C API, for PyDataMem_SetHandler. A numpy without it (< 1.22) or one that
     * fails to import leaves the guard unavailable, not the module. */
    if (_import_array() < 0) {
        PyErr_Clear();
        return 0;
    }
    numpy_ready = 1;
    return 0;
}

static Guard *
guard_of(PyObject *capsule)
{
    Guard *g = (Guard *)PyCapsule_GetPointer(capsule, "mem_handler");
    if (g != NULL && g->handler.allocator.malloc != guard_malloc) {
        PyErr_SetString(PyExc_TypeError, "not an onyxrt memory guard");
        return NULL;
    }
    return g;
}

/* A new guard numpy's allocator in the current context (0: no limit): the token
 * (guard, previous handler), or NULL with an exception set. */
PyObject *
guard_begin(unsigned long long max_tensor, unsigned long long max_run)
{
    if (!numpy_ready) {
        PyErr_SetString(PyExc_RuntimeError, "numpy's allocator API is not available");
        return NULL;
    }
    Guard *g = (Guard *)calloc(1, sizeof(Guard));
    if (g == NULL) {
        return PyErr_NoMemory();
    }
    strncpy(g->handler.name, "onyxrt_memory_guard", sizeof(g->handler.name) - 1);
    g->handler.version = 1;
    g->handler.allocator.ctx = g;
    g->handler.allocator.malloc = guard_malloc;
    g->handler.allocator.calloc = guard_calloc;
    g->handler.allocator.realloc = guard_realloc;
    g->handler.allocator.free = guard_free;
    g->max_tensor = (size_t)max_tensor;
    g->max_run = (size_t)max_run;
    g->armed = 1;
    PyObject *capsule = PyCapsule_New(g, "mem_handler", guard_destroy);
    if (capsule == NULL) {
        free(g);
        return NULL;
    }
    PyObject *previous = PyDataMem_SetHandler(capsule);
    if (previous == NULL) {
        Py_DECREF(capsule);
        return NULL;
    }
    return Py_BuildValue("(NN)", capsule, previous);
}

/* Disarm the guard of guard_begin's token and restore the handler it replaced; 0, or
 * -1 with an exception set. */
int
guard_end(PyObject *token)
{
    if (!PyTuple_Check(token) || PyTuple_GET_SIZE(token) != 2) {
        PyErr_SetString(PyExc_TypeError, "not a memory guard's token");
        return -1;
    }
    Guard *g = guard_of(PyTuple_GET_ITEM(token, 0));
    if (g == NULL) {
        return -1;
    }
    __atomic_store_n(&g->armed, 0, __ATOMIC_RELAXED);
    PyObject *ours = PyDataMem_SetHandler(PyTuple_GET_ITEM(token, 1));
    if (ours == NULL) {
        return -1;
    }
    Py_DECREF(ours);
    return 0;
}

/* guard_start(max_tensor_bytes, max_run_bytes) -> (guard, previous handler). */
PyObject *
py_guard_start(PyObject *self, PyObject *args)
{
    unsigned long long max_tensor, max_run;
    if (!PyArg_ParseTuple(args, "KK", &max_tensor, &max_run)) {
        return NULL;
    }
    return guard_begin(max_tensor, max_run);
}

/* guard_stop((guard, previous)): guard_end of guard_start's token. */
PyObject *
py_guard_stop(PyObject *self, PyObject *args)
{
    PyObject *token;
    if (!PyArg_ParseTuple(args, "O", &token)) {
        return NULL;
    }
    if (guard_end(token) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

/* guard_state(guard) -> (live, peak, refused_kind, refused_bytes, refused_live). */
PyObject *
py_guard_state(PyObject *self, PyObject *args)
{
    PyObject *capsule;
    if (!PyArg_ParseTuple(args, "O", &capsule)) {
        return NULL;
    }
    Guard *g = guard_of(capsule);
    if (g == NULL) {
        return NULL;
    }
    return Py_BuildValue(
        "(KKiKK)", (unsigned long long)__atomic_load_n(&g->live, __ATOMIC_RELAXED),
        (unsigned long long)__atomic_load_n(&g->peak, __ATOMIC_RELAXED), g->refused_kind,
        (unsigned long long)g->refused_bytes, (unsigned long long)g->refused_live);
}
