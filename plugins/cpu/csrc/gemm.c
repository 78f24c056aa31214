/* Single-precision GEMM, C = finish(A @ B), with either operand packed ahead of time.
 *
 * Why our own: the models' GEMMs have one constant operand (a MatMul's weights, a
 * convolution's filters), which can be laid out once for the inner kernel, and an
 * epilogue (bias, residual, activation) that can be applied while a tile of C is still
 * in registers. OpenBLAS repacks both operands on every call, zeroes C before writing
 * it, and leaves the epilogue to another pass; its kernels also run these shapes at
 * 80-95 GFLOP/s per core here, this one at about 100 (as onnxruntime's MLAS). The layout
 * is the classic one of BLIS and MLAS: the kernel computes an MR x NR tile of C from a
 * panel of A (MR rows, k-major) and a panel of B (NR columns, k-major), in blocks of KC
 * along k, with the tile held in 16 vector registers.
 *
 * Packed A: for each k block (KC), for each panel of MR rows: kc x MR floats.
 * Packed B: for each k block, for each panel of NR columns: kc x NR floats.
 * Rows and columns past the matrix's edge are zero in a packed panel. A row-major A (k
 * contiguous, a MatMul's activations) is not packed at all: the kernel broadcasts its
 * elements from the rows where they lie, as MLAS does (copying a [197, 3072] A into
 * panels first cost ~7% of the product; ViT 93 -> 86.5 ms, BERT 61 -> 57 without it).
 * KC is 512: against 256, 1-3% faster on the transformers' [128-197, 768-3072] products.
 *
 * Work is split over the thread pool in equal runs of C's tiles; each piece packs the B
 * panels it reads itself when B was not packed ahead. Floating-point contraction is on
 * in this file only: the kernel is built on fused multiply-adds (as OpenBLAS's and
 * MLAS's are). */

#if defined(__clang__)
#pragma clang fp contract(fast)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=fast")
#endif

#include "vec16.h"

/* What is applied to each finished tile of C while it is in cache: a bias per row (a
 * convolution's output channel) or per column (a MatMul's output feature), a residual z
 * (C's shape, row stride ldz), then an activation (ACT_*), as onyxrt_epilogue does. For
 * one tile (tile_finish) the pointers start at the tile's first row and column. */
typedef struct {
    const float *row_bias, *col_bias, *z;
    idx ldz;
    int act;
    float p0, p1;
} GemmFinish;

/* One accumulator of row i, columns [16 half, 16 half + 16): + biases + z, activation;
 * the same operations in the same order as onyxrt_epilogue. */
static inline __attribute__((always_inline)) v16
finish16(v16 v, const GemmFinish *f, int i, int half)
{
    if (f->col_bias) {
        v += *(const v16 *)(f->col_bias + 16 * half);
    }
    if (f->row_bias) {
        v += f->row_bias[i];
    }
    if (f->z) {
        v += *(const v16 *)(f->z + i * f->ldz + 16 * half);
    }
    return activate16(v, f->act, f->p0, f->p1);
}

/* The first `rows` rows of an MR x NR tile of C (row stride ldc) = the panels' product,
 * + C when accumulate, then `finish` (NULL: none) while the tile is still in registers.
 *
 * All MR rows (gemm_tile): 16 accumulators, 2 loads of B and 8 broadcasts of A per step
 * of k. On AVX-512 that is 16 of the 32 vector registers; with AVX2 the compiler splits
 * each vector in two and spills some (correct, slower: onyxrt_cpu.native routes GEMMs here
 * only where AVX-512 is present).
 *
 * Fewer rows (gemm_rows_tile: a batch-1 MLP, a decoder's few tokens): only the rows that
 * exist are computed, and with one or two rows k is split over several accumulators so
 * that the fused multiply-adds' latency does not bound the loop (one row has only two
 * dependency chains otherwise). `rows` and `phases` are constants in each use. */
static inline __attribute__((always_inline)) void
tile_rows(const int rows, const int phases, const int halves, const int direct, const float *restrict pa,
          idx lda, const float *restrict pb, idx kc, float *restrict c, idx ldc, int accumulate,
          const GemmFinish *finish)
{
/* element (i, kk) of the tile's rows of A: a packed panel (k-major, MR per k) or, direct,
 * A itself (row stride lda, k contiguous) */
#define A_AT(i, kk) (direct ? pa[(i) * lda + (kk)] : pa[(kk) * GEMM_MR + (i)])
    v16 acc[4][GEMM_MR][2];
    for (int p = 0; p < phases; p++) {
        for (int i = 0; i < rows; i++) {
            for (int h = 0; h < halves; h++) {
                acc[p][i][h] = (v16){0};
            }
        }
    }
    idx k = 0;
    for (; k + phases <= kc; k += phases) {
#pragma GCC unroll 4
        for (int p = 0; p < phases; p++) {
            const v16 b0 = *(const v16 *)(pb + (k + p) * GEMM_NR);
            const v16 b1 = halves == 2 ? *(const v16 *)(pb + (k + p) * GEMM_NR + 16) : b0;
#pragma GCC unroll 8
            for (int i = 0; i < rows; i++) {
                const float a = A_AT(i, k + p);
                acc[p][i][0] += a * b0;
                if (halves == 2) {
                    acc[p][i][1] += a * b1;
                }
            }
        }
    }
    for (; k < kc; k++) {
        const v16 b0 = *(const v16 *)(pb + k * GEMM_NR);
        const v16 b1 = halves == 2 ? *(const v16 *)(pb + k * GEMM_NR + 16) : b0;
#pragma GCC unroll 8
        for (int i = 0; i < rows; i++) {
            const float a = A_AT(i, k);
            acc[0][i][0] += a * b0;
            if (halves == 2) {
                acc[0][i][1] += a * b1;
            }
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < rows; i++) {
#pragma GCC unroll 2
        for (int h = 0; h < halves; h++) {
            v16 v = acc[0][i][h];
#pragma GCC unroll 4
            for (int p = 1; p < phases; p++) {
                v += acc[p][i][h];
            }
            v16 *row = (v16 *)(c + i * ldc);
            if (accumulate) {
                v += row[h];
            }
            if (finish) {
                v = finish16(v, finish, i, h);
            }
            row[h] = v;
        }
    }
#undef A_AT
}

/* The kernels below take A as a packed panel (lda 0) or, direct, as the tile's first row
 * of A itself with rows lda floats apart and k contiguous: a row-major A is read where it
 * lies, as MLAS does, instead of being copied into panels first (for a [197, 3072] A that
 * copy is 2.4 MB written and read again, ~7% of the product). */
#define TILE_ROWS(rows, phases, halves, ...)                                                   \
    do {                                                                                    \
        if (lda) {                                                                          \
            tile_rows(rows, phases, halves, 1, pa, lda, __VA_ARGS__);                       \
        } else {                                                                            \
            tile_rows(rows, phases, halves, 0, pa, 0, __VA_ARGS__);                         \
        }                                                                                   \
    } while (0)

MULTIVERSION static void
gemm_tile(const float *restrict pa, idx lda, const float *restrict pb, idx kc, float *restrict c, idx ldc,
          int accumulate, const GemmFinish *finish)
{
    TILE_ROWS(GEMM_MR, 1, 2, pb, kc, c, ldc, accumulate, finish);
}

/* gemm_tile for the first mm (1 .. MR - 1) rows only. */
MULTIVERSION static void
gemm_rows_tile(idx mm, const float *restrict pa, idx lda, const float *restrict pb, idx kc, float *restrict c,
               idx ldc, int accumulate, const GemmFinish *finish)
{
    switch (mm) {
    case 1: TILE_ROWS(1, 4, 2, pb, kc, c, ldc, accumulate, finish); break;
    case 2: TILE_ROWS(2, 2, 2, pb, kc, c, ldc, accumulate, finish); break;
    case 3: TILE_ROWS(3, 1, 2, pb, kc, c, ldc, accumulate, finish); break;
    case 4: TILE_ROWS(4, 1, 2, pb, kc, c, ldc, accumulate, finish); break;
    case 5: TILE_ROWS(5, 1, 2, pb, kc, c, ldc, accumulate, finish); break;
    case 6: TILE_ROWS(6, 1, 2, pb, kc, c, ldc, accumulate, finish); break;
    default: TILE_ROWS(7, 1, 2, pb, kc, c, ldc, accumulate, finish); break;
    }
}

/* The left half (16 columns) of a tile of mm (1 .. MR) rows: a tile at C's right edge
 * with at most 16 columns, which the full tile would compute twice over (a 1-D
 * convolution's 101 positions end in a tile of 5 columns). One accumulator per row, so
 * k is split over more of them for fewer rows. */
MULTIVERSION static void
gemm_half_tile(idx mm, const float *restrict pa, idx lda, const float *restrict pb, idx kc, float *restrict c,
               idx ldc)
{
    switch (mm) {
    case 1: TILE_ROWS(1, 4, 1, pb, kc, c, ldc, 0, NULL); break;
    case 2: TILE_ROWS(2, 4, 1, pb, kc, c, ldc, 0, NULL); break;
    case 3: TILE_ROWS(3, 2, 1, pb, kc, c, ldc, 0, NULL); break;
    case 4: TILE_ROWS(4, 2, 1, pb, kc, c, ldc, 0, NULL); break;
    case 5: TILE_ROWS(5, 2, 1, pb, kc, c, ldc, 0, NULL); break;
    case 6: TILE_ROWS(6, 2, 1, pb, kc, c, ldc, 0, NULL); break;
    case 7: TILE_ROWS(7, 1, 1, pb, kc, c, ldc, 0, NULL); break;
    default: TILE_ROWS(GEMM_MR, 1, 1, pb, kc, c, ldc, 0, NULL); break;
    }
}

/* A tile at C's edge (nn < NR columns, any rows): computed into a full scratch tile, then
 * the mm x nn corner moved into C. */
static void
gemm_edge_tile(const float *pa, idx lda, const float *pb, idx kc, float *c, idx ldc, idx mm, idx nn,
               int accumulate)
{
    float tile[GEMM_MR * GEMM_NR];
    if (nn <= 16) {
        gemm_half_tile(mm, pa, lda, pb, kc, tile, GEMM_NR);
    } else if (mm == GEMM_MR) {
        gemm_tile(pa, lda, pb, kc, tile, GEMM_NR, 0, NULL);
    } else {
        gemm_rows_tile(mm, pa, lda, pb, kc, tile, GEMM_NR, 0, NULL);
    }
    for (idx i = 0; i < mm; i++) {
        float *cr = c + i * ldc;
        const float *tr = tile + i * GEMM_NR;
        if (accumulate) {
            for (idx j = 0; j < nn; j++) {
                cr[j] += tr[j];
            }
        } else {
            for (idx j = 0; j < nn; j++) {
                cr[j] = tr[j];
            }
        }
    }
}

static inline idx
panels(idx extent, idx width)
{
    return (extent + width - 1) / width;
}

/* One packed panel: `width` lines (rows of A or columns of B) starting at line `first`,
 * k in [k0, k0 + kc), element (line, k) of the source at src[line * ls + k * ks];
 * dst[kk * width + l], zero past `lines`. */
static void
pack_panel(const float *src, idx ls, idx ks, idx first, idx lines, idx k0, idx kc, idx width,
           float *restrict dst)
{
    const idx valid = lines - first < width ? lines - first : width;
    if (ls != 1 && ks == 1) {
        /* Each line's k values are contiguous (A row-major, or B column-major as a
         * transposed key): read them in order and store with the panel's stride. Going
         * k by k instead reads `width` lines apart per store: 4-5x slower (a 197 x 197 A
         * took 45 µs to pack, the product after it 38). */
        for (idx l = 0; l < valid; l++) {
            const float *s = src + (first + l) * ls + k0;
            float *d = dst + l;
            for (idx kk = 0; kk < kc; kk++) {
                d[kk * width] = s[kk];
            }
        }
        for (idx kk = 0; kk < kc; kk++) {
            for (idx l = valid; l < width; l++) {
                dst[kk * width + l] = 0.0f;
            }
        }
        return;
    }
    for (idx kk = 0; kk < kc; kk++) {
        const float *s = src + first * ls + (k0 + kk) * ks;
        float *d = dst + kk * width;
        if (ls == 1) {
            for (idx l = 0; l < valid; l++) {
                d[l] = s[l];
            }
        } else {
            for (idx l = 0; l < valid; l++) {
                d[l] = s[l * ls];
            }
        }
        for (idx l = valid; l < width; l++) {
            d[l] = 0.0f;
        }
    }
}

static idx
gemm_packed_floats(idx lines, idx k, int side_b)
{
    return panels(lines, side_b ? GEMM_NR : GEMM_MR) * (side_b ? GEMM_NR : GEMM_MR) * k;
}

/* Packs all of an operand: `lines` rows of A (side_b 0) or columns of B (side_b 1). */
static void
pack_operand(const float *src, idx ls, idx ks, idx lines, idx k, int side_b, idx panel_begin,
             idx panel_end, float *dst)
{
    const idx width = side_b ? GEMM_NR : GEMM_MR;
    const idx count = panels(lines, width);
    for (idx k0 = 0; k0 < k; k0 += GEMM_KC) {
        const idx kc = k - k0 < GEMM_KC ? k - k0 : GEMM_KC;
        for (idx p = panel_begin; p < panel_end; p++) {
            pack_panel(src, ls, ks, p * width, lines, k0, kc, width,
                       dst + k0 * count * width + p * kc * width);
        }
    }
}

typedef struct {
    const float *src;
    idx ls, ks, lines, k;
    int side_b;
    float *dst;
} PackCall;

static void
pack_range(void *ctx, idx begin, idx end)
{
    const PackCall *p = (const PackCall *)ctx;
    pack_operand(p->src, p->ls, p->ks, p->lines, p->k, p->side_b, begin, end, p->dst);
}

static void
pack_parallel(const float *src, idx ls, idx ks, idx lines, idx k, int side_b, float *dst)
{
    PackCall call = {src, ls, ks, lines, k, side_b, dst};
    const idx width = side_b ? GEMM_NR : GEMM_MR;
    parallel_for(pack_range, &call, panels(lines, width),
                 1 + MIN_PARALLEL_FLOATS / (width * k + 1));
}

static int
finish_needed(const GemmFinish *f)
{
    return f->row_bias || f->col_bias || f->z || f->act != ACT_NONE;
}

/* f for the tile of C at (m0, n0). */
static GemmFinish
tile_finish(const GemmFinish *f, idx m0, idx n0)
{
    return (GemmFinish){f->row_bias ? f->row_bias + m0 : NULL, f->col_bias ? f->col_bias + n0 : NULL,
                        f->z ? f->z + m0 * f->ldz + n0 : NULL, f->ldz, f->act, f->p0, f->p1};
}

/* The finish (tile_finish's, for this tile) on the mm x nn tile c, row by row: tiles at
 * C's edge, which the full-tile kernel does not take. */
static void
finish_tile(float *c, idx ldc, idx mm, idx nn, const GemmFinish *f)
{
    for (idx i = 0; i < mm; i++) {
        float *cr = c + i * ldc;
        if (f->col_bias) {
            for (idx j = 0; j < nn; j++) {
                cr[j] += f->col_bias[j];
            }
        }
        onyxrt_epilogue(cr, 0, 1, 1, nn, f->row_bias ? f->row_bias + i : NULL,
                        f->z ? f->z + i * f->ldz : NULL, f->act, f->p0, f->p1);
    }
}

typedef struct {
    const float *pa;           /* packed A, or (lda > 0) A itself: row i at pa + i * lda */
    idx lda;
    const float *b;            /* packed B, or B itself (element (k, j) at b[k*brs + j*bcs]) */
    idx brs, bcs;
    int b_packed;
    float *c;
    idx ldc, m, n, k;
    const GemmFinish *finish;  /* NULL: none */
    int failed;
} GemmCall;

/* Tiles [begin, end) of C, numbered column panel by column panel (tile t is row panel
 * t % mpan of column panel t / mpan), so that a piece reads few B panels and the pieces
 * get equal shares of the tiles whatever C's shape. */
static void
gemm_range(void *ctx, idx begin, idx end)
{
    GemmCall *g = (GemmCall *)ctx;
    const idx mpan = panels(g->m, GEMM_MR), npan = panels(g->n, GEMM_NR);
    float *bbuf = NULL;
    if (!g->b_packed) {
        bbuf = (float *)malloc(sizeof(float) * GEMM_KC * GEMM_NR);
        if (bbuf == NULL) {
            __atomic_store_n(&g->failed, 1, __ATOMIC_RELAXED);
            return;
        }
    }
    for (idx k0 = 0; k0 < g->k; k0 += GEMM_KC) {
        const idx kc = g->k - k0 < GEMM_KC ? g->k - k0 : GEMM_KC;
        for (idx p = begin / mpan; p <= (end - 1) / mpan; p++) {
            const idx n0 = p * GEMM_NR, nn = g->n - n0 < GEMM_NR ? g->n - n0 : GEMM_NR;
            const float *bp;
            if (g->b_packed) {
                bp = g->b + k0 * npan * GEMM_NR + p * kc * GEMM_NR;
            } else {
                /* column j of B is line j: line stride bcs, k stride brs */
                pack_panel(g->b, g->bcs, g->brs, n0, g->n, k0, kc, GEMM_NR, bbuf);
                bp = bbuf;
            }
            const idx q_begin = p == begin / mpan ? begin % mpan : 0;
            const idx q_end = p == (end - 1) / mpan ? (end - 1) % mpan + 1 : mpan;
            for (idx q = q_begin; q < q_end; q++) {
                const idx m0 = q * GEMM_MR, mm = g->m - m0 < GEMM_MR ? g->m - m0 : GEMM_MR;
                const float *ap = g->lda ? g->pa + m0 * g->lda + k0 : g->pa + k0 * mpan * GEMM_MR + q * kc * GEMM_MR;
                float *ct = g->c + m0 * g->ldc + n0;
                const int finishing = g->finish && k0 + kc == g->k;
                GemmFinish tf;
                if (finishing) {
                    tf = tile_finish(g->finish, m0, n0);
                }
                if (mm == GEMM_MR && nn == GEMM_NR) {
                    gemm_tile(ap, g->lda, bp, kc, ct, g->ldc, k0 > 0, finishing ? &tf : NULL);
                } else if (nn == GEMM_NR) {
                    gemm_rows_tile(mm, ap, g->lda, bp, kc, ct, g->ldc, k0 > 0, finishing ? &tf : NULL);
                } else {
                    gemm_edge_tile(ap, g->lda, bp, kc, ct, g->ldc, mm, nn, k0 > 0);
                    if (finishing) {
                        finish_tile(ct, g->ldc, mm, nn, &tf);
                    }
                }
            }
        }
    }
    free(bbuf);
}

/* C (m x n, row stride ldc) = finish(A @ B). A is packed (a_packed) or element (i, k) at
 * a[i*ars + k*acs]; B likewise with (k, j) at b[k*brs + j*bcs]; finish may be NULL. -1
 * when out of memory. */
static int
onyxrt_gemm(const float *a, idx ars, idx acs, int a_packed, const float *b, idx brs, idx bcs,
            int b_packed, float *c, idx ldc, idx m, idx n, idx k, const GemmFinish *finish)
{
    if (m == 0 || n == 0) {
        return 0;
    }
    if (finish && !finish_needed(finish)) {
        finish = NULL;
    }
    if (k == 0) {
        for (idx i = 0; i < m; i++) {
            fill(c + i * ldc, n, 0.0f);
        }
        if (finish) {
            finish_tile(c, ldc, m, n, finish);
        }
        return 0;
    }
    /* a row-major A (k contiguous) is read in place; any other layout is packed first */
    const int direct = !a_packed && acs == 1 && ars > 0;
    float *packed_a = NULL;
    if (!a_packed && !direct) {
        packed_a = (float *)malloc(sizeof(float) * (size_t)gemm_packed_floats(m, k, 0));
        if (packed_a == NULL) {
            return -1;
        }
        pack_parallel(a, ars, acs, m, k, 0, packed_a);
    }
    const idx tiles = panels(m, GEMM_MR) * panels(n, GEMM_NR);
    GemmCall call = {packed_a ? packed_a : a, direct ? ars : 0, b, brs, bcs, b_packed, c, ldc, m, n, k, finish, 0};
    /* at least ~1 MFLOP per piece: a smaller piece costs more to hand over than it saves
     * (a tile of a product with fewer than MR rows computes only those rows) */
    const idx tile_rows_done = m < GEMM_MR ? m : GEMM_MR;
    parallel_for(gemm_range, &call, tiles, 1 + (1 << 20) / (2 * tile_rows_done * GEMM_NR * k));
    free(packed_a);
    return call.failed ? -1 : 0;
}

/* A batch of products C[e] = A[e] @ B[e] (e < batch), C contiguous (batch, m, n), the
 * operands strided (element (i, k) of A[e] at a[e*abs + i*ars + k*acs], B likewise): each
 * entry is one thread's whole product (A packed into that thread's buffer, B's panels
 * packed as its tiles read them), the entries split over the pool. Attention's per-head
 * products (12 heads of [197, 64] x [64, 197]) are too small for a tile split of each to
 * pay: OpenBLAS, called once per head, ran them at 60 GFLOP/s on 2 cores. */
typedef struct {
    const float *a, *b;
    float *c;
    idx a_bs, ars, acs, b_bs, brs, bcs, m, n, k;
    int failed;
} BatchedGemm;

static void
batched_range(void *ctx, idx begin, idx end)
{
    BatchedGemm *g = (BatchedGemm *)ctx;
    /* a row-major A[e] is read in place (see onyxrt_gemm), any other packed per entry */
    const int direct = g->acs == 1 && g->ars > 0;
    float *pa = NULL;
    if (!direct) {
        pa = (float *)malloc(sizeof(float) * (size_t)gemm_packed_floats(g->m, g->k, 0));
        if (pa == NULL) {
            __atomic_store_n(&g->failed, 1, __ATOMIC_RELAXED);
            return;
        }
    }
    const idx tiles = panels(g->m, GEMM_MR) * panels(g->n, GEMM_NR);
    for (idx e = begin; e < end; e++) {
        if (!direct) {
            pack_operand(g->a + e * g->a_bs, g->ars, g->acs, g->m, g->k, 0, 0, panels(g->m, GEMM_MR), pa);
        }
        GemmCall call = {direct ? g->a + e * g->a_bs : pa, direct ? g->ars : 0, g->b + e * g->b_bs, g->brs,
                         g->bcs, 0, g->c + e * g->m * g->n, g->n, g->m, g->n, g->k, NULL, 0};
        gemm_range(&call, 0, tiles);
        if (call.failed) {
            __atomic_store_n(&g->failed, 1, __ATOMIC_RELAXED);
            break;
        }
    }
    free(pa);
}

/* ---------------------------------------------------------------- Python entry points */

/* The floats a strided (rows x cols) matrix spans: its last element's index + 1. */
static idx
span(idx rows, idx cols, idx rs, idx cs)
{
    return rows == 0 || cols == 0 ? 0 : (rows - 1) * rs + (cols - 1) * cs + 1;
}

PyObject *
py_gemm_pack(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *so, *dso;
    idx ls, ks, lines, k;
    int side_b;
    if (!PyArg_ParseTuple(args, "OnnnnpO", &so, &ls, &ks, &lines, &k, &side_b, &dso)) {
        return NULL;
    }
    if (check_positive("line stride", ls, 0) < 0 || check_positive("k stride", ks, 0) < 0 ||
        check_positive("lines", lines, 0) < 0 || check_positive("k", k, 0) < 0) {
        return NULL;
    }
    enum { SRC, DST, VIEWS };
    Py_buffer v[VIEWS];
    memset(v, 0, sizeof(v));
    if (get_f32(so, &v[SRC], 0, span(lines, k, ls, ks), "source") < 0 ||
        get_f32(dso, &v[DST], 1, gemm_packed_floats(lines, k, side_b), "packed") < 0) {
        release_all(v, VIEWS);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    pack_parallel((const float *)v[SRC].buf, ls, ks, lines, k, side_b, (float *)v[DST].buf);
    Py_END_ALLOW_THREADS
    release_all(v, VIEWS);
    Py_RETURN_NONE;
}

PyObject *
py_gemm(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *ao, *bo, *co, *rbo = Py_None, *cbo = Py_None, *zo = Py_None;
    idx ars, acs, brs, bcs, ldc, m, n, k;
    int a_packed, b_packed;
    GemmFinish f = {NULL, NULL, NULL, 0, ACT_NONE, 0.0f, 0.0f};
    if (!PyArg_ParseTuple(args, "OnnpOnnpOnnn|OOOiff", &ao, &ars, &acs, &a_packed, &bo, &brs,
                          &bcs, &b_packed, &co, &m, &n, &k, &rbo, &cbo, &zo, &f.act, &f.p0,
                          &f.p1)) {
        return NULL;
    }
    if (check_activation(f.act) < 0) {
        return NULL;
    }
    if (check_positive("m", m, 0) < 0 || check_positive("n", n, 0) < 0 ||
        check_positive("k", k, 0) < 0 || check_positive("A row stride", ars, 0) < 0 ||
        check_positive("A column stride", acs, 0) < 0 ||
        check_positive("B row stride", brs, 0) < 0 ||
        check_positive("B column stride", bcs, 0) < 0) {
        return NULL;
    }
    enum { A, B, C, ROW_BIAS, COL_BIAS, Z, VIEWS };
    Py_buffer v[VIEWS];
    memset(v, 0, sizeof(v));
    int ok = get_f32(ao, &v[A], 0, a_packed ? gemm_packed_floats(m, k, 0) : span(m, k, ars, acs), "A") == 0;
    ok = ok && get_f32(bo, &v[B], 0, b_packed ? gemm_packed_floats(n, k, 1) : span(k, n, brs, bcs), "B") == 0;
    ok = ok && get_f32_rows(co, &v[C], m, n, &ldc, 1, "C") == 0;
    ok = ok && get_optional_f32(rbo, &v[ROW_BIAS], m, "row bias") == 0;
    ok = ok && get_optional_f32(cbo, &v[COL_BIAS], n, "column bias") == 0;
    ok = ok && (zo == Py_None || get_f32_rows(zo, &v[Z], m, n, &f.ldz, 0, "z") == 0);
    int rc = 0;
    if (ok) {
        f.row_bias = (const float *)v[ROW_BIAS].buf;
        f.col_bias = (const float *)v[COL_BIAS].buf;
        f.z = (const float *)v[Z].buf;
        Py_BEGIN_ALLOW_THREADS
        rc = onyxrt_gemm((const float *)v[A].buf, ars, acs, a_packed, (const float *)v[B].buf, brs,
                         bcs, b_packed, (float *)v[C].buf, ldc, m, n, k, &f);
        Py_END_ALLOW_THREADS
    }
    release_all(v, VIEWS);
    if (!ok) {
        return NULL;
    }
    if (rc < 0) {
        return PyErr_NoMemory();
    }
    Py_RETURN_NONE;
}

/* gemm_batched(a, a_offset, a_batch_stride, a_row_stride, a_col_stride, b, ..., c, batch,
 * m, n, k): a and b are C-contiguous float32 buffers the strided operands lie in (offsets
 * and strides in floats, all >= 0); c a contiguous (batch, m, n). */
PyObject *
py_gemm_batched(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *ao, *bo, *co;
    idx aoff, a_bs, ars, acs, boff, b_bs, brs, bcs, batch, m, n, k;
    if (!PyArg_ParseTuple(args, "OnnnnOnnnnOnnnn", &ao, &aoff, &a_bs, &ars, &acs, &bo, &boff, &b_bs,
                          &brs, &bcs, &co, &batch, &m, &n, &k)) {
        return NULL;
    }
    const idx values[] = {aoff, a_bs, ars, acs, boff, b_bs, brs, bcs, batch, m, n, k};
    const char *names[] = {"A offset", "A batch stride", "A row stride", "A column stride",
                           "B offset", "B batch stride", "B row stride", "B column stride",
                           "batch", "m", "n", "k"};
    for (int i = 0; i < 12; i++) {
        if (check_positive(names[i], values[i], 0) < 0) {
            return NULL;
        }
    }
    enum { A, B, C, VIEWS };
    Py_buffer v[VIEWS];
    memset(v, 0, sizeof(v));
    const int empty = batch == 0 || m == 0 || n == 0 || k == 0;
    const idx a_need = empty ? 0 : aoff + (batch - 1) * a_bs + span(m, k, ars, acs);
    const idx b_need = empty ? 0 : boff + (batch - 1) * b_bs + span(k, n, brs, bcs);
    int ok = get_f32(ao, &v[A], 0, a_need, "A") == 0;
    ok = ok && get_f32(bo, &v[B], 0, b_need, "B") == 0;
    ok = ok && get_f32(co, &v[C], 1, batch * m * n, "C") == 0;
    int failed = 0;
    if (ok && batch > 0 && m > 0 && n > 0) {
        float *c = (float *)v[C].buf;
        Py_BEGIN_ALLOW_THREADS
        if (k == 0) {
            fill(c, batch * m * n, 0.0f);
        } else {
            BatchedGemm g = {(const float *)v[A].buf + aoff, (const float *)v[B].buf + boff, c,
                             a_bs, ars, acs, b_bs, brs, bcs, m, n, k, 0};
            parallel_for(batched_range, &g, batch, 1);
            failed = g.failed;
        }
        Py_END_ALLOW_THREADS
    }
    release_all(v, VIEWS);
    if (!ok) {
        return NULL;
    }
    if (failed) {
        return PyErr_NoMemory();
    }
    Py_RETURN_NONE;
}

PyObject *
py_gemm_info(PyObject *self, PyObject *args)
{
    (void)self;
    (void)args;
    return Py_BuildValue("(nnnO)", (idx)GEMM_MR, (idx)GEMM_NR, (idx)GEMM_KC,
                         cpu_has_avx512() ? Py_True : Py_False);
}
