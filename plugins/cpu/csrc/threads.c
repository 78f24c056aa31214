/* The CPU provider's thread pool: its compiled kernels and OpenBLAS share it.
 *
 * Why one pool: numpy's OpenBLAS keeps its worker threads spinning for a while after
 * every GEMM (about 2^28 cycles by default), so a second pool of ours would share a core
 * with a spinning OpenBLAS thread and lose (measured: ResNet-50's conv epilogues went
 * from 2 to 16 ms per run on 2 cores). OpenBLAS 0.3.27+ lets its caller supply the
 * threads it runs a parallel call on (openblas_set_threads_callback_function);
 * onyxrt_cpu.blas_threads hands it blas_callback below, so GEMMs and the kernels here run
 * on the same workers, which spin briefly (SPIN_NS) and then sleep.
 *
 * The pool runs one "parallel call" at a time: `parts` pieces of work at once, piece 0 on
 * the calling thread and piece i on worker i - 1. OpenBLAS's level-3 jobs wait for each
 * other, so every piece must have its own thread: a call never runs more pieces than
 * the pool has threads. A second caller while the pool is in use (another Python thread
 * running a session, or calling numpy) runs a kernel's pieces one after another itself,
 * and an OpenBLAS call on temporary threads. A forked child starts with no workers and
 * makes new ones on first use. Without POSIX threads every call runs on the caller.
 *
 * OpenBLAS calls run one at a time (blas_lock), whatever threads they land on: OpenBLAS
 * hands job i of every parallel call the work buffer of "thread i", which its own server
 * never lends to two calls at once (thread i runs one job at a time). Two calls at once
 * through the callback - an sgemm and a dgemm from two Python threads (each type's GEMM
 * driver serializes only its own calls) - wrote into each other's buffers and returned
 * wrong products. */

#include "native.h"

#if defined(__unix__) || defined(__APPLE__)
#define ONYXRT_HAVE_PTHREADS 1
#include <pthread.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>
#endif

/* How long an idle worker keeps polling for the next call before it sleeps: longer than
 * the gap between two kernels of a session run (tens of microseconds of Python), short
 * enough that an idle session costs nothing measurable. */
#define SPIN_NS 200000L
/* Most workers the pool will start (OpenBLAS's own limit is 256 threads). */
#define MAX_WORKERS 255

/* How many threads the kernels split over: OpenBLAS's current thread count when the
 * pool serves it (so intra_op_num_threads, set through threadpoolctl, governs both),
 * else the configured size. */
typedef int (*ThreadCountFn)(void);
static ThreadCountFn blas_thread_count = NULL;
static idx configured_threads = 1;
/* Kernels split their work only once OpenBLAS runs on this pool (blas_hooks): next to
 * OpenBLAS's own spinning threads they must stay on the caller. */
static int kernels_split = 0;

/* One piece of a parallel call (piece `part` of `parts`). */
typedef void (*PartFn)(void *ctx, idx part, idx parts);

#ifdef ONYXRT_HAVE_PTHREADS

/* A slot's piece: posted by the caller, taken by its worker (running, then idle), or
 * taken back by the caller before the worker started it (cancelled). */
enum { SLOT_IDLE = 0, SLOT_POSTED = 1, SLOT_RUNNING = 2, SLOT_CANCELLED = 3 };

/* What worker i - 1 runs: piece `part` of fn's call, written by the caller for that
 * worker only (so a worker that takes no part in a call never reads it), announced by
 * setting `state` to SLOT_POSTED and bumping `ticket`. One cache line each. */
typedef struct {
    unsigned long ticket;
    int state;
    PartFn fn;
    void *ctx;
    idx parts;
    unsigned long first_ticket; /* the ticket when the worker was started */
} __attribute__((aligned(64))) Slot;

static struct {
    pthread_mutex_t lock;
    pthread_cond_t wake;
    int workers;          /* threads started */
    int sleepers;         /* workers blocked on `wake` */
    int busy;             /* a parallel call holds the pool */
    int pending;          /* worker pieces of the current call not finished */
} pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0, 0};

static Slot slots[MAX_WORKERS + 1];

/* Set on the pool's own threads: a kernel they run never waits for the pool. */
static __thread int on_worker = 0;

/* One OpenBLAS parallel call at a time (see the top of this file). */
static pthread_mutex_t blas_lock = PTHREAD_MUTEX_INITIALIZER;
/* Set while this thread is inside blas_callback. */
static __thread int in_blas_call = 0;

static long
now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long)t.tv_sec * 1000000000L + t.tv_nsec;
}

static inline void
cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Waits for a ticket after `seen` in `slot`: polls for SPIN_NS, then sleeps on `wake`. */
static unsigned long
await_call(Slot *slot, unsigned long seen)
{
    const long deadline = now_ns() + SPIN_NS;
    for (int i = 0;; i++) {
        unsigned long g = __atomic_load_n(&slot->ticket, __ATOMIC_ACQUIRE);
        if (g != seen) {
            return g;
        }
        if ((i & 255) == 255 && now_ns() > deadline) {
            break;
        }
        cpu_relax();
    }
    pthread_mutex_lock(&pool.lock);
    /* sleepers, then the ticket, both sequentially consistent: a caller that bumps the
     * ticket and then reads sleepers == 0 is seen here before this thread waits. */
    __atomic_add_fetch(&pool.sleepers, 1, __ATOMIC_SEQ_CST);
    unsigned long g;
    while ((g = __atomic_load_n(&slot->ticket, __ATOMIC_SEQ_CST)) == seen) {
        pthread_cond_wait(&pool.wake, &pool.lock);
    }
    __atomic_sub_fetch(&pool.sleepers, 1, __ATOMIC_SEQ_CST);
    pthread_mutex_unlock(&pool.lock);
    return g;
}

static void *
worker_main(void *arg)
{
    const idx part = (idx)(intptr_t)arg;
    Slot *slot = &slots[part];
    on_worker = 1;
    unsigned long seen = slot->first_ticket;
    for (;;) {
        seen = await_call(slot, seen);
        int posted = SLOT_POSTED;
        if (!__atomic_compare_exchange_n(&slot->state, &posted, SLOT_RUNNING, 0, __ATOMIC_ACQ_REL,
                                         __ATOMIC_ACQUIRE)) {
            continue; /* taken back: the caller finished that call without this thread */
        }
        slot->fn(slot->ctx, part, slot->parts);
        __atomic_store_n(&slot->state, SLOT_IDLE, __ATOMIC_RELAXED);
        __atomic_sub_fetch(&pool.pending, 1, __ATOMIC_ACQ_REL);
    }
    return NULL;
}

/* Starts workers until there are `want`; returns how many there are. */
static int
grow(int want)
{
    if (want > MAX_WORKERS) {
        want = MAX_WORKERS;
    }
    while (pool.workers < want) {
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        slots[pool.workers + 1].first_ticket = slots[pool.workers + 1].ticket;
        int rc = pthread_create(&t, &attr, worker_main, (void *)(intptr_t)(pool.workers + 1));
        pthread_attr_destroy(&attr);
        if (rc != 0) {
            break;
        }
        pool.workers++;
    }
    return pool.workers;
}

/* Takes the pool for one parallel call of `parts` pieces: 1 when held (release with
 * pool_release), 0 when another call holds it or it cannot have that many threads. */
static int
pool_acquire(idx parts)
{
    if (on_worker) {
        return 0;
    }
    int expected = 0;
    if (!__atomic_compare_exchange_n(&pool.busy, &expected, 1, 0, __ATOMIC_ACQUIRE,
                                     __ATOMIC_RELAXED)) {
        return 0;
    }
    if (grow((int)(parts - 1)) < parts - 1) {
        __atomic_store_n(&pool.busy, 0, __ATOMIC_RELEASE);
        return 0;
    }
    return 1;
}

static void
pool_release(void)
{
    __atomic_store_n(&pool.busy, 0, __ATOMIC_RELEASE);
}

/* Runs fn's pieces on the held pool: 1..parts-1 on workers, 0 here; returns when all
 * have finished. With `optional` pieces (a kernel's, which share out their work among
 * whoever runs them), a worker that has not started by the time piece 0 is done is
 * not waited for: on a busy machine a sleeping or descheduled worker would otherwise
 * hold up the whole call. OpenBLAS's jobs wait for each other: every one must run. */
static void
pool_dispatch(PartFn fn, void *ctx, idx parts, int optional)
{
    __atomic_store_n(&pool.pending, (int)(parts - 1), __ATOMIC_RELAXED);
    for (idx p = 1; p < parts; p++) {
        slots[p].fn = fn;
        slots[p].ctx = ctx;
        slots[p].parts = parts;
        __atomic_store_n(&slots[p].state, SLOT_POSTED, __ATOMIC_RELEASE);
        __atomic_add_fetch(&slots[p].ticket, 1, __ATOMIC_SEQ_CST);
    }
    if (__atomic_load_n(&pool.sleepers, __ATOMIC_SEQ_CST) > 0) {
        pthread_mutex_lock(&pool.lock);
        pthread_cond_broadcast(&pool.wake);
        pthread_mutex_unlock(&pool.lock);
    }
    fn(ctx, 0, parts);
    if (optional) {
        for (idx p = 1; p < parts; p++) {
            int posted = SLOT_POSTED;
            if (__atomic_compare_exchange_n(&slots[p].state, &posted, SLOT_CANCELLED, 0,
                                            __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
                __atomic_sub_fetch(&pool.pending, 1, __ATOMIC_ACQ_REL);
            }
        }
    }
    while (__atomic_load_n(&pool.pending, __ATOMIC_ACQUIRE) > 0) {
        cpu_relax();
    }
}

/* In a forked child only the forking thread exists: forget the workers (new ones are
 * started on first use) and any call the parent had in flight. */
static void
after_fork_in_child(void)
{
    pthread_mutex_init(&pool.lock, NULL);
    pthread_cond_init(&pool.wake, NULL);
    pool.workers = 0;
    pool.sleepers = 0;
    pool.busy = 0;
    pool.pending = 0;
    pthread_mutex_init(&blas_lock, NULL); /* a call in flight in the parent is not ours */
    in_blas_call = 0;
    for (int i = 0; i <= MAX_WORKERS; i++) {
        slots[i].state = SLOT_IDLE;
    }
    on_worker = 0;
}

void
threads_init(void)
{
    cpu_set_t set;
    long n = 1;
    if (sched_getaffinity(0, sizeof(set), &set) == 0) {
        n = CPU_COUNT(&set);
    } else {
        n = sysconf(_SC_NPROCESSORS_ONLN);
    }
    configured_threads = n < 1 ? 1 : (n > MAX_WORKERS + 1 ? MAX_WORKERS + 1 : n);
    pthread_atfork(NULL, NULL, after_fork_in_child);
}

/* One OpenBLAS job on a temporary thread (the pool is in use). */
typedef struct {
    OpenblasJobFn dojob;
    int number;
    void *data;
    int dojob_data;
} TemporaryJob;

static void *
temporary_main(void *arg)
{
    TemporaryJob *job = (TemporaryJob *)arg;
    job->dojob(job->number, job->data, job->dojob_data);
    return NULL;
}

/* OpenBLAS's jobs when the pool is taken: one temporary thread each but the first. */
static void
blas_on_temporary_threads(OpenblasJobFn dojob, int numjobs, size_t elsize, char *jobdata,
                          int dojob_data)
{
    TemporaryJob *jobs = (TemporaryJob *)calloc((size_t)numjobs, sizeof(TemporaryJob));
    pthread_t *threads = (pthread_t *)calloc((size_t)numjobs, sizeof(pthread_t));
    int started = 1;
    if (jobs != NULL && threads != NULL) {
        for (; started < numjobs; started++) {
            jobs[started] = (TemporaryJob){dojob, started, jobdata + (size_t)started * elsize,
                                           dojob_data};
            if (pthread_create(&threads[started], NULL, temporary_main, &jobs[started]) != 0) {
                break;
            }
        }
    }
    dojob(0, jobdata, dojob_data);
    /* Jobs that got no thread (out of memory or threads): run here, after the others.
     * Level-3 jobs wait for each other, so this can only happen when the system is
     * already failing; there is no better order to try. */
    for (int i = started; i < numjobs; i++) {
        dojob(i, jobdata + (size_t)i * elsize, dojob_data);
    }
    for (int i = 1; i < started; i++) {
        pthread_join(threads[i], NULL);
    }
    free(jobs);
    free(threads);
}

typedef struct {
    OpenblasJobFn dojob;
    size_t elsize;
    char *jobdata;
    int dojob_data;
} BlasCall;

static void
blas_part(void *ctx, idx part, idx parts)
{
    (void)parts;
    BlasCall *call = (BlasCall *)ctx;
    call->dojob((int)part, call->jobdata + (size_t)part * call->elsize, call->dojob_data);
}

static void
blas_run(OpenblasJobFn dojob, int numjobs, size_t elsize, void *jobdata, int dojob_data)
{
    if (numjobs == 1) {
        dojob(0, jobdata, dojob_data);
        return;
    }
    if (!pool_acquire(numjobs)) {
        blas_on_temporary_threads(dojob, numjobs, elsize, (char *)jobdata, dojob_data);
        return;
    }
    BlasCall call = {dojob, elsize, (char *)jobdata, dojob_data};
    pool_dispatch(blas_part, &call, numjobs, 0);
    pool_release();
}

void
blas_callback(int sync, OpenblasJobFn dojob, int numjobs, size_t elsize, void *jobdata,
              int dojob_data)
{
    (void)sync; /* every call here returns when its jobs are done */
    if (numjobs <= 0) {
        return;
    }
    if (on_worker || in_blas_call) {
        /* A call from inside one of OpenBLAS's jobs (OpenBLAS makes none today): the
         * enclosing call holds the lock, and waiting for it here would never end. */
        blas_run(dojob, numjobs, elsize, jobdata, dojob_data);
        return;
    }
    pthread_mutex_lock(&blas_lock);
    in_blas_call = 1;
    blas_run(dojob, numjobs, elsize, jobdata, dojob_data);
    in_blas_call = 0;
    pthread_mutex_unlock(&blas_lock);
}

/* fn(ctx, p, parts) for every p in [0, parts), at once on the pool when it is free, else
 * one after another here. Pieces must share out their work (range_part): a worker that
 * has not started when piece 0 ends is not waited for. */
static void
parallel_run(PartFn fn, void *ctx, idx parts)
{
    if (parts > 1 && pool_acquire(parts)) {
        pool_dispatch(fn, ctx, parts, 1);
        pool_release();
        return;
    }
    for (idx p = 0; p < parts; p++) {
        fn(ctx, p, parts);
    }
}

#else /* no POSIX threads: everything on the caller */

void
threads_init(void)
{
}

void
blas_callback(int sync, OpenblasJobFn dojob, int numjobs, size_t elsize, void *jobdata,
              int dojob_data)
{
    (void)sync;
    /* Never installed without threads (onyxrt_cpu.blas_threads checks threads()). */
    for (int i = 0; i < numjobs; i++) {
        dojob(i, (char *)jobdata + (size_t)i * elsize, dojob_data);
    }
}

static void
parallel_run(PartFn fn, void *ctx, idx parts)
{
    for (idx p = 0; p < parts; p++) {
        fn(ctx, p, parts);
    }
}

#endif

/* How many threads to split `items` over: at most the pool's (OpenBLAS's current count
 * when it runs on the pool), with at least `min_items` each (so small work stays on the
 * caller). */
static idx
parallel_parts(idx items, idx min_items)
{
    if (!kernels_split) {
        return 1;
    }
    idx threads = configured_threads;
    if (blas_thread_count != NULL) {
        const int t = blas_thread_count();
        threads = t < 1 ? 1 : (t < threads ? t : threads);
    }
    idx parts = min_items > 0 ? items / min_items : items;
    if (parts > threads) {
        parts = threads;
    }
    return parts < 1 ? 1 : parts;
}

/* Piece `part` of `parts` of [0, items): [begin, end). */
static void
parallel_range(idx part, idx parts, idx items, idx *begin, idx *end)
{
    *begin = items * part / parts;
    *end = items * (part + 1) / parts;
}

/* A range call shared out in `chunks` consecutive ranges. Piece p owns the p-th run of
 * consecutive chunks and takes them in order; when its own are gone it takes the others'
 * next ones: a thread that starts late or runs slow (another job on its core) takes
 * fewer, and the caller alone takes all of them when no worker starts. Owning a run keeps
 * a thread on the same region call after call (a layer's output rows are the next
 * layer's input rows), so what one layer wrote is mostly still in the cache of the core
 * that reads it. */
typedef struct {
    idx next; /* the run's next chunk to take */
    char pad[64 - sizeof(idx)];
} RunCursor;

typedef struct {
    RangeFn fn;
    void *ctx;
    idx items, chunks;
    RunCursor run[MAX_WORKERS + 1]; /* one per piece; run p: parallel_range(p, parts, chunks) */
} RangeCall;

static void
range_part(void *ctx, idx part, idx parts)
{
    RangeCall *call = (RangeCall *)ctx;
    for (idx k = 0; k < parts; k++) {
        const idx owner = (part + k) % parts;
        const idx last = call->chunks * (owner + 1) / parts; /* the end of owner's run */
        for (;;) {
            const idx chunk = __atomic_fetch_add(&call->run[owner].next, 1, __ATOMIC_RELAXED);
            if (chunk >= last) {
                break;
            }
            idx begin, end;
            parallel_range(chunk, call->chunks, call->items, &begin, &end);
            if (begin < end) {
                call->fn(call->ctx, begin, end);
            }
        }
    }
}

/* Chunks per thread: enough to even out a slow thread, few enough that each is worth
 * handing out (a GEMM's chunk packs the B panels it reads: finer chunks pack them more
 * often). */
#define CHUNKS_PER_THREAD 4

void
parallel_for_chunked(RangeFn fn, void *ctx, idx items, idx min_items, idx per_thread)
{
    const idx parts = parallel_parts(items, min_items);
    idx chunks = parts;
    if (parts > 1) {
        const idx most = items / (min_items > 0 ? min_items : 1);
        chunks = parts * per_thread < most ? parts * per_thread : most;
        chunks = chunks < parts ? parts : chunks;
    }
    RangeCall call;
    call.fn = fn;
    call.ctx = ctx;
    call.items = items;
    call.chunks = chunks;
    for (idx p = 0; p < parts; p++) {
        idx last;
        parallel_range(p, parts, chunks, &call.run[p].next, &last);
    }
    parallel_run(range_part, &call, parts);
}

void
parallel_for(RangeFn fn, void *ctx, idx items, idx min_items)
{
    parallel_for_chunked(fn, ctx, items, min_items, CHUNKS_PER_THREAD);
}

PyObject *
py_threads(PyObject *self, PyObject *args)
{
    (void)self;
    (void)args;
#ifdef ONYXRT_HAVE_PTHREADS
    return Py_BuildValue("(nn)", configured_threads, parallel_parts((idx)1 << 30, 1));
#else
    return Py_BuildValue("(nn)", (idx)1, (idx)1);
#endif
}

PyObject *
py_set_threads(PyObject *self, PyObject *args)
{
    (void)self;
    idx n;
    if (!PyArg_ParseTuple(args, "n", &n)) {
        return NULL;
    }
    if (check_positive("threads", n, 1) < 0) {
        return NULL;
    }
#ifdef ONYXRT_HAVE_PTHREADS
    configured_threads = n > MAX_WORKERS + 1 ? MAX_WORKERS + 1 : n;
#endif
    Py_RETURN_NONE;
}

PyObject *
py_blas_hooks(PyObject *self, PyObject *args)
{
    (void)self;
    unsigned long long count_fn;
    if (!PyArg_ParseTuple(args, "K", &count_fn)) {
        return NULL;
    }
    /* The address of OpenBLAS's openblas_get_num_threads (0: none): kernels follow it. */
    blas_thread_count = (ThreadCountFn)(uintptr_t)count_fn;
    kernels_split = 1;
    return PyLong_FromVoidPtr((void *)&blas_callback);
}
