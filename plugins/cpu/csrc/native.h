/*
 * onyxrt_cpu._native: the CPU provider's compiled inner loops (float32): what the source
 * files share. One file per concept: buffers.c (argument checks), epilogue.c, phases.c
 * (the phase planes of strided windows), depthwise.c, pool.c, im2col.c, winograd.c,
 * activation.c (GELU, Softmax), normalization.c (LayerNormalization), gemm.c, nchwc.c
 * (convolutions in the blocked channel layout), transpose.c, threads.c, module.c; qgemm.c
 * (the int8 GEMM, AVX-512 VNNI), qconv.c (QLinearConv on it), quantize.c (8-bit
 * quantization passes, QLinearAdd); vec16.h holds the vector helpers of the register-tiled
 * kernels, qrequant.h the requantization and float epilogues of the int8 kernels. Two
 * files are no kernels: guard.c (the memory guard, a numpy allocator) and fast_run.c
 * (InferenceSession.run's usual call in one C call, for onyxrt.fast_run).
 *
 * numpy runs these operations as several whole-array passes with short inner loops
 * (a 3x3 depthwise convolution is ~19 passes over 7-element rows at 7x7); here each is
 * one pass whose inner loop the compiler vectorizes. Only what numpy does badly lives
 * here: everything else, and every other dtype, stays in numpy. The module is optional:
 * onyxrt_cpu.native falls back to the numpy kernels when it was not built.
 *
 * Interface rules (checked by onyxrt_cpu.native before calling, and again here so that
 * no call can read or write out of bounds): every array is a C-contiguous float32
 * buffer, dimensions are passed as integers, and the GIL is released while computing.
 * Built with function multiversioning on x86-64 Linux (AVX-512 / AVX2 / baseline picked
 * at load time), so a wheel built here runs on any x86-64 machine.
 *
 * Kernels split their work over the thread pool of threads.c, which OpenBLAS's GEMMs run
 * on as well (see there why they must share one).
 */
#ifndef ONYXRT_NATIVE_H
#define ONYXRT_NATIVE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) && !defined(ONYXRT_NO_CLONES)
#define MULTIVERSION __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define MULTIVERSION
#endif

typedef Py_ssize_t idx;

/* Activations the epilogues apply (onyxrt_cpu.native's ACT_* read these). */
enum { ACT_NONE = 0, ACT_RELU = 1, ACT_CLIP = 2, ACT_LEAKY = 3 };

/* Degree + 1 of the erf polynomial in onyxrt_cpu.kernels._special (erf_float32). */
#define ERF_COEFFS 19

/* A 2-D window geometry: input (N, C, H, W), kernel, output, strides, leading pads,
 * dilations. */
typedef struct {
    idx n, c, h, w;       /* input (N, C, H, W) */
    idx kh, kw;           /* kernel */
    idx oh, ow;           /* output */
    idx sh, sw, ph, pw, dh, dw; /* strides, leading pads, dilations */
} Geometry;

/* The phase planes of one input plane (see phases.c). */
typedef struct {
    idx hq, wq;       /* phase plane extent */
    idx plane;        /* floats per phase plane, with slack for the last row's overrun */
    idx phases;       /* sh * sw */
    idx span;         /* outputs computed per plane: oh * wq */
} PhaseLayout;

/* buffers.c: argument checks. */
int get_f32(PyObject *obj, Py_buffer *view, int writable, idx need, const char *name);
int get_optional_f32(PyObject *obj, Py_buffer *view, idx need, const char *name);
/* A row-wise function's x (whole rows of n floats; n < 1 is an error) and out (as many floats,
 * writable): the number of rows, or -1 with a Python error set and nothing held. */
idx get_rows_f32(PyObject *xo, PyObject *yo, idx n, Py_buffer *x, Py_buffer *y);
int get_f32_rows(PyObject *obj, Py_buffer *view, idx rows, idx cols, idx *ld, int writable,
                 const char *name);
int get_bytes(PyObject *obj, Py_buffer *view, int writable, idx need, idx itemsize,
              const char *name);
void release(Py_buffer *view);
/* release() on views[0..count): views zeroed (memset) or got are both safe. */
void release_all(Py_buffer *views, int count);
/* 0, or -1 with ValueError when `act` is no ACT_* code. */
int check_activation(int act);
int check_positive(const char *what, idx value, idx minimum);
void valid_range(idx n_out, idx stride, idx offset, idx size, idx *lo, idx *hi);
int parse_geometry(PyObject *tuple, Geometry *g);

/* threads.c: the pool, and what OpenBLAS hands the threads it is given. */
typedef void (*OpenblasJobFn)(int thread_num, void *jobdata, int dojob_data);
void threads_init(void);
/* fn(ctx, begin, end) over consecutive ranges covering [0, items), each range once, on
 * up to the pool's threads with at least `min_items` items each, so that small work
 * stays on the caller (ranges are handed out as threads ask: a slow thread takes fewer). */
typedef void (*RangeFn)(void *ctx, idx begin, idx end);
void parallel_for(RangeFn fn, void *ctx, idx items, idx min_items);
/* parallel_for with `per_thread` chunks per thread (at most one per min_items items):
 * finer chunks even out the end of a call whose items cost alike and share nothing. */
void parallel_for_chunked(RangeFn fn, void *ctx, idx items, idx min_items, idx per_thread);
/* Below this many floats of work, a piece costs more to hand to a worker than to do. */
#define MIN_PARALLEL_FLOATS 16384
void blas_callback(int sync, OpenblasJobFn dojob, int numjobs, size_t elsize, void *jobdata,
                   int dojob_data);

/* Whether the CPU has AVX-512: 32 vector registers of 16 floats, which the register tiles
 * of gemm.c and nchwc.c are sized for (with fewer or narrower registers they spill). */
static inline int
cpu_has_avx512(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") != 0;
#else
    return 0;
#endif
}

/* gemm.c: C = A @ B with either operand packed ahead (see there for the layout). */
#define GEMM_MR 8
#define GEMM_NR 32
#define GEMM_KC 512

/* epilogue.c */
void onyxrt_epilogue(float *y, idx r_begin, idx r_end, idx channels, idx length,
                     const float *bias, const float *z, int act, float p0, float p1);

/* phases.c */
PhaseLayout phase_layout(const Geometry *g);
void fill_phases(const float *x, const Geometry *g, const PhaseLayout *p, float *buf, float pad);
idx tap_offset(const Geometry *g, const PhaseLayout *p, idx ky, idx kx);

/* What a window kernel on phase planes works with (depthwise.c, pool.c): the layout, a
 * buffer of the phase planes followed by rows of width wq for one output plane ("wide"),
 * and where each tap starts reading. */
typedef struct {
    PhaseLayout p;
    float *buf;
    float *wide;
    idx *offsets;
} PhaseWork;

int phase_work_open(PhaseWork *w, const Geometry *g);
void phase_work_close(PhaseWork *w);
float *phase_work_target(const PhaseWork *w, float *yo, const Geometry *g);
void phase_work_store(const PhaseWork *w, const float *target, float *yo, const Geometry *g);

/* dst[0..n) = value, as a plain loop: rows here are often a few floats long, where a
 * memset call costs more than the stores. */
static inline void
fill(float *dst, idx n, float value)
{
    for (idx i = 0; i < n; i++) {
        dst[i] = value;
    }
}

/* The Python entry points (module.c's method table). */
PyObject *py_gelu_erf(PyObject *self, PyObject *args);
PyObject *py_erf32(PyObject *self, PyObject *args);
PyObject *py_unary_activation(PyObject *self, PyObject *args);
PyObject *py_transpose(PyObject *self, PyObject *args);
PyObject *py_gelu_tanh(PyObject *self, PyObject *args);
PyObject *py_logistic_tanh(PyObject *self, PyObject *args);
PyObject *py_recurrent(PyObject *self, PyObject *args);
PyObject *py_quantize8(PyObject *self, PyObject *args);
PyObject *py_dequantize4(PyObject *self, PyObject *args);
PyObject *py_accumulators_to_float(PyObject *self, PyObject *args);
PyObject *py_elementwise_group(PyObject *self, PyObject *args);

/* logistic.c: onnxruntime's Sigmoid and Tanh on n floats (y may be x). */
void onyxrt_logistic(const float *x, float *y, idx n);
void onyxrt_tanh(const float *x, float *y, idx n);
PyObject *py_qgemm_u8s8(PyObject *self, PyObject *args);
PyObject *py_qgemm_supported(PyObject *self, PyObject *args);
PyObject *py_qgemm_pack(PyObject *self, PyObject *args);
PyObject *py_qconv(PyObject *self, PyObject *args);
PyObject *py_select4(PyObject *self, PyObject *args);
PyObject *py_qgemm_float(PyObject *self, PyObject *args);
PyObject *py_qlinear_add(PyObject *self, PyObject *args);
PyObject *py_qconv_depthwise(PyObject *self, PyObject *args);

/* qgemm.c: whether the CPU has AVX-512 VNNI, and C (m x n, int32, raw sums) = A (uint8,
 * m x k, rows `lda` apart) @ B (int8, packed as qgemm.c describes) on the thread pool, or,
 * given `rq` (qrequant.h), those sums requantized into its bytes instead (c unused). */
struct QgemmRequant;
struct QgemmFloat;
int qgemm_supported(void);
void qgemm_run(const uint8_t *a, idx lda, const int8_t *bp, idx m, idx n, idx k, int32_t *c,
               const struct QgemmRequant *rq);
/* The same with qrequant.h's float epilogue: float32 results instead of the int32 sums. */
void qgemm_run_float(const uint8_t *a, idx lda, const int8_t *bp, idx m, idx n, idx k,
                     const struct QgemmFloat *fq);


/* x and y of an elementwise or row-wise call; `n` floats per row (1: elementwise), or a
 * kernel's own parameter for elementwise ranges that need one. */
typedef struct {
    const float *x;
    float *y;
    idx n;
} RowsCall;

/* Check x and out (float32 buffers, out writable and as large as x) and run `range` over
 * x's floats in parallel with RowsCall{x, out, n_arg}; None, or NULL with an exception. */
PyObject *elementwise_f32(PyObject *xo, PyObject *yo, void (*range)(void *, idx, idx), idx n_arg);
PyObject *py_epilogue(PyObject *self, PyObject *args);
PyObject *py_depthwise(PyObject *self, PyObject *args);
PyObject *py_maxpool(PyObject *self, PyObject *args);
PyObject *py_global_average(PyObject *self, PyObject *args);
PyObject *py_im2col(PyObject *self, PyObject *args);
PyObject *py_winograd_input(PyObject *self, PyObject *args);
PyObject *py_winograd_output(PyObject *self, PyObject *args);
PyObject *py_softmax(PyObject *self, PyObject *args);
PyObject *py_layernorm(PyObject *self, PyObject *args);
PyObject *py_normalize_rows(PyObject *self, PyObject *args);
PyObject *py_threads(PyObject *self, PyObject *args);
PyObject *py_gemm_pack(PyObject *self, PyObject *args);
PyObject *py_gemm(PyObject *self, PyObject *args);
PyObject *py_gemv(PyObject *self, PyObject *args);
PyObject *py_gemm_info(PyObject *self, PyObject *args);
PyObject *py_gemm_batched(PyObject *self, PyObject *args);
PyObject *py_pad(PyObject *self, PyObject *args);
PyObject *py_log_softmax(PyObject *self, PyObject *args);
PyObject *py_classify_row(PyObject *self, PyObject *args);
PyObject *py_tree_forest(PyObject *self, PyObject *args);
PyObject *py_tree_run(PyObject *self, PyObject *args);
PyObject *py_svm_rbf(PyObject *self, PyObject *args);
PyObject *py_svm_couple(PyObject *self, PyObject *args);
PyObject *py_svm_decide(PyObject *self, PyObject *args);
/* softmax.c: softmax over `rows` contiguous rows of n floats (y may be x). */
void onyxrt_softmax(const float *x, float *y, idx rows, idx n);
PyObject *py_set_threads(PyObject *self, PyObject *args);
PyObject *py_blas_hooks(PyObject *self, PyObject *args);
PyObject *py_nchwc_conv(PyObject *self, PyObject *args);
PyObject *py_nchwc_depthwise(PyObject *self, PyObject *args);
PyObject *py_nchwc_reorder(PyObject *self, PyObject *args);

/* guard.c: the memory guard, a numpy allocator enforcing a run's limits. */
int guard_init(void);
PyObject *guard_begin(unsigned long long max_tensor, unsigned long long max_run);
int guard_end(PyObject *token);
PyObject *py_guard_start(PyObject *self, PyObject *args);
PyObject *py_guard_stop(PyObject *self, PyObject *args);
PyObject *py_guard_state(PyObject *self, PyObject *args);

/* fast_run.c: the compiled run path of a host plan (onyxrt_cpu.fast_run). */
int fast_run_init(PyObject *module);
PyObject *py_fast_run(PyObject *self, PyObject *args);
PyObject *py_nchwc_maxpool(PyObject *self, PyObject *args);
PyObject *py_nchwc_mean(PyObject *self, PyObject *args);

/* Row helpers shared by activation.c and normalization.c. */

/* exp for softmax's x - max <= 0: 2^n * e^r, n = round(x / ln 2), |r| <= ln 2 / 2, e^r
 * by its degree-6 Taylor polynomial (relative error < 2e-7 there). Inputs below
 * EXP_UNDERFLOW give 0 (numpy would give a subnormal, far below any sum's rounding);
 * NaN stays NaN. Written without branches on values so the loop vectorizes. */
#define EXP_UNDERFLOW (-87.0f)

static inline float
exp_nonpositive(float x)
{
    const float xc = x < EXP_UNDERFLOW ? EXP_UNDERFLOW : (x > 0.0f ? 0.0f : x);
    const float n = rintf(xc * 1.44269504088896341f);
    const float r = (xc - n * 0.693359375f) + n * 2.12194440e-4f; /* ln 2 split in two */
    float p = 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    const int32_t bits = ((int32_t)n + 127) << 23; /* 2^n as a float's bit pattern */
    float two_n;
    memcpy(&two_n, &bits, sizeof(two_n));
    float e = p * two_n;
    e = x < EXP_UNDERFLOW ? 0.0f : e;
    return x != x ? x : e;
}

/* Sum of a row with 16 running partial sums (vectorizes; about as accurate as numpy's
 * pairwise float32 sum for rows of a few thousand). */
static inline float
row_sum(const float *x, idx n)
{
    float part[16] = {0};
    idx i = 0;
    for (; i + 16 <= n; i += 16) {
        for (int j = 0; j < 16; j++) {
            part[j] += x[i + j];
        }
    }
    float total = 0.0f;
    for (int j = 0; j < 16; j++) {
        total += part[j];
    }
    for (; i < n; i++) {
        total += x[i];
    }
    return total;
}

/* Largest element of a row, with 16 running maxima (vectorizes). A NaN is skipped here
 * but still makes its row NaN: x - max is NaN there, and so is the row's sum. */
static inline float
row_max(const float *x, idx n)
{
    float part[16];
    for (int j = 0; j < 16; j++) {
        part[j] = -INFINITY;
    }
    idx i = 0;
    for (; i + 16 <= n; i += 16) {
        for (int j = 0; j < 16; j++) {
            part[j] = x[i + j] > part[j] ? x[i + j] : part[j];
        }
    }
    float m = -INFINITY;
    for (int j = 0; j < 16; j++) {
        m = part[j] > m ? part[j] : m;
    }
    for (; i < n; i++) {
        m = x[i] > m ? x[i] : m;
    }
    return m;
}

#endif /* ONYXRT_NATIVE_H */
