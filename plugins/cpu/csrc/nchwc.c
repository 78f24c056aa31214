/* Convolutions in the blocked channel layout NCHWc: a tensor (N, C, H, W) is stored as
 * (N, ceil(C/16), H, W, 16), channel c at block c / 16, lane c % 16, lanes past C zero.
 *
 * Why: in NCHW a convolution is a GEMM over a (C * taps, H * W) column matrix, which must
 * be packed (or im2col'd) on every call, and a depthwise convolution works on planes
 * whose rows are a few floats long (7, 14) or must be deinterleaved for stride 2. In
 * NCHWc the 16 channels of one pixel are one vector: a convolution reads its input in
 * place, broadcasting one channel of 8 pixels against the 32 output channels of two
 * packed filter blocks (the GEMM tile of gemm.c, 16 accumulators, with the input read
 * where it lies), and a depthwise convolution is one vector multiply-add per tap whatever
 * the stride. This is onnxruntime's layout for the same reason (its NCHWc transformer);
 * MobileNetV2's pointwise and depthwise layers are where NCHW loses most.
 *
 * Tensors here: x the input, blocked (N, G, H, W, 16) or plain NCHW (G = C channel groups
 * of one: a first layer with few channels reads the image as it is); y the output
 * (N, OB, OH, OW, 16); filters packed by onyxrt_cpu.native.pack_nchwc_filters as
 * [panel of 4 output blocks][tap][group][channel in group][64]; bias padded to OB * 16; z (a
 * residual) in y's layout. Padding is made explicit in a scratch copy of the input, so
 * the tile loop has no bounds checks (depthwise checks bounds instead: its input is read
 * once, and a copy would double that).
 *
 * Floating-point contraction is on in this file (as in gemm.c): sums are fused
 * multiply-adds, taken in the order tap, group, channel within each chunk of channel
 * groups (see conv_row_tiles), chunk by chunk. */

#if defined(__clang__)
#pragma clang fp contract(fast)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=fast")
#endif

#include "vec16.h"

/* The max pool and the reorders also have AVX-512 versions written with intrinsics
 * (target attributes, chosen at the call by cpu_has_avx512()). */
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_AVX512_INTRINSICS 1
#endif

#define BLOCK 16
#define QUAD 64        /* output channels per packed filter panel: four blocks */
#define QUAD_BLOCKS 4
#define MAX_TILE_PIXELS 24 /* output pixels per tile (along one output row) */
#define NARROW_TILE_PIXELS 6 /* pixels per tile without AVX-512 (see conv_row) */
/* Panels of filters larger than CHUNK_PANEL_BYTES (more than a core's L2 holds beside
 * its input) are read CHUNK_FILTER_BYTES at a time (see conv_row_tiles). */
#define CHUNK_PANEL_BYTES (640 * 1024)
#define CHUNK_FILTER_BYTES (160 * 1024)

typedef struct {
    const float *x;       /* input at (0, 0) of the (padded) image 0 */
    idx groups, gstride;  /* channel groups and the floats between them */
    idx xrow, xpix, ximage;
    const idx *tapoff;    /* per tap, floats from a window's origin to the tap's pixel */
    idx taps;
    const float *w;       /* packed filters */
    idx panels, ob;
    const float *bias, *z;
    float *y;
    idx n, oh, ow, sh, sw;
    int act;
    float p0, p1;
    int rows_outer;       /* item order: (image, row, panel) rather than (image, panel, row) */
    idx rows, row_pixels; /* work rows per image, pixels per work row */
    int wide;             /* 32 vector registers of 16 floats: the wide tiles (see conv_row) */
    idx gchunk;           /* channel groups per pass over a work row (see conv_row_tiles) */
} ConvCall;

/* The 6 x 4 tile (every panel of four whole blocks: most of a network's layers) with its
 * 24 accumulators as named variables. Written as conv_tile's array, GCC kept a few of
 * them on the stack and moved them to and from registers between the multiply-adds of
 * the unrolled channel loop; named, all 24 stay in registers beside the 4 filter vectors
 * (ResNet-50 20.2-20.6 -> 19.7-19.9 ms a run). The same sums in the same order as
 * conv_tile, so the same bits. */
#define T64_LOAD(p) \
    v16 s##p##0 = acc[p][0], s##p##1 = acc[p][1], s##p##2 = acc[p][2], s##p##3 = acc[p][3]
#define T64_FMA(p) \
    do { \
        const float b_ = step ? xc[(p) * step] : xc[off[p]]; \
        s##p##0 += b_ * f0; \
        s##p##1 += b_ * f1; \
        s##p##2 += b_ * f2; \
        s##p##3 += b_ * f3; \
    } while (0)
#define T64_BACK(p) \
    do { \
        acc[p][0] = s##p##0; \
        acc[p][1] = s##p##1; \
        acc[p][2] = s##p##2; \
        acc[p][3] = s##p##3; \
    } while (0)

static inline __attribute__((always_inline)) void
conv_tile_6x4(const ConvCall *c, const float *x0, const idx *poff, const float *w, int cg,
              int step, idx g0, idx g1, v16 acc[MAX_TILE_PIXELS][QUAD_BLOCKS])
{
    const idx taps = c->taps, groups = c->groups, gstride = c->gstride;
    const idx *tapoff = c->tapoff;
    idx off[6];
    for (int p = 0; p < 6; p++) {
        off[p] = step ? p * step : poff[p] - poff[0];
    }
    T64_LOAD(0);
    T64_LOAD(1);
    T64_LOAD(2);
    T64_LOAD(3);
    T64_LOAD(4);
    T64_LOAD(5);
    for (idx t = 0; t < taps; t++) {
        const float *xt = x0 + tapoff[t] + poff[0] + g0 * gstride;
        const float *wt = w + (t * groups + g0) * cg * QUAD;
        for (idx g = g0; g < g1; g++, xt += gstride) {
#pragma GCC unroll 16
            for (int ci = 0; ci < cg; ci++, wt += QUAD) {
                const float *xc = xt + ci;
                /* the filters 8 KB ahead: a layer's first tile streams them from memory
                 * (ResNet-50's 1x1 layers at 7 x 7 read 4 MB each; 19.4-20.4 -> 19.1-19.4
                 * ms a run; 16 KB ahead was no better) */
                __builtin_prefetch(wt + 2048, 0, 3);
                __builtin_prefetch(wt + 2048 + BLOCK, 0, 3);
                __builtin_prefetch(wt + 2048 + 2 * BLOCK, 0, 3);
                __builtin_prefetch(wt + 2048 + 3 * BLOCK, 0, 3);
                const v16 f0 = *(const v16 *)wt, f1 = *(const v16 *)(wt + BLOCK),
                          f2 = *(const v16 *)(wt + 2 * BLOCK), f3 = *(const v16 *)(wt + 3 * BLOCK);
                T64_FMA(0);
                T64_FMA(1);
                T64_FMA(2);
                T64_FMA(3);
                T64_FMA(4);
                T64_FMA(5);
            }
        }
    }
    T64_BACK(0);
    T64_BACK(1);
    T64_BACK(2);
    T64_BACK(3);
    T64_BACK(4);
    T64_BACK(5);
}

#undef T64_LOAD
#undef T64_FMA
#undef T64_BACK

/* One tile: `count` output pixels (<= `pixels`) of one work row, `blocks` blocks of 16
 * channels: 6 x 4, 8 x 3, 12 x 2 or 24 x 1 (24 accumulators each; the last
 * blocks of a panel when the output's blocks are not a multiple of 4). Per channel step
 * that is `blocks` filter loads and `pixels` broadcasts for pixels x blocks multiply-adds.
 * These and `cg` (channels per group: 16 blocked, 1 plain) are constants in each caller,
 * so the loops unroll and the accumulators stay in registers. poff[p]: where pixel p's
 * window starts, from x0. `step` (a constant too, 0 when the pixels are not evenly
 * spaced): poff[p] = poff[0] + step p, so each broadcast is a constant offset from one
 * pointer; otherwise each pixel needs its own offset register, and 12 or 16 of them
 * spill. */
static inline __attribute__((always_inline)) void
conv_tile(const ConvCall *c, const float *x0, const idx *poff, const float *w, int cg,
          int pixels, int blocks, int step, idx g0, idx g1, v16 acc[MAX_TILE_PIXELS][QUAD_BLOCKS])
{
    /* the call's fields in locals: read through `c` in the loops, GCC kept each pixel's
     * offset in its own register (spilled: ~70 GFLOP/s instead of ~96 on a 24-pixel
     * tile over 32 input channels) */
    if (pixels == 6 && blocks == 4) {
        conv_tile_6x4(c, x0, poff, w, cg, step, g0, g1, acc);
        return;
    }
    const idx taps = c->taps, groups = c->groups, gstride = c->gstride;
    const idx *tapoff = c->tapoff;
    idx off[MAX_TILE_PIXELS];
#pragma GCC unroll 24
    for (int p = 0; p < pixels; p++) {
        off[p] = step ? p * step : poff[p] - poff[0];
    }
    for (idx t = 0; t < taps; t++) {
        const float *xt = x0 + tapoff[t] + poff[0] + g0 * gstride;
        const float *wt = w + (t * groups + g0) * cg * QUAD;
        for (idx g = g0; g < g1; g++, xt += gstride) {
#pragma GCC unroll 16
            for (int ci = 0; ci < cg; ci++, wt += QUAD) {
                /* evenly spaced pixels: each broadcast a constant displacement from xc
                 * (an embedded-broadcast operand of the multiply-add) */
                const float *xc = xt + ci;
                v16 f[QUAD_BLOCKS];
#pragma GCC unroll 4
                for (int j = 0; j < blocks; j++) {
                    f[j] = *(const v16 *)(wt + j * BLOCK);
                }
#pragma GCC unroll 24
                for (int p = 0; p < pixels; p++) {
                    const float a = step ? xc[p * step] : xc[off[p]];
#pragma GCC unroll 4
                    for (int j = 0; j < blocks; j++) {
                        acc[p][j] += a * f[j];
                    }
                }
            }
        }
    }
}

/* A tile's partial sums (earlier channel groups) from y, or zeros: pixels [0, count). */
static inline __attribute__((always_inline)) void
start_tile(const ConvCall *c, v16 acc[MAX_TILE_PIXELS][QUAD_BLOCKS], int partial, idx n, idx block0,
           idx plane, idx i0, idx count, int pixels, int blocks)
{
#pragma GCC unroll 4
    for (int j = 0; j < blocks; j++) {
        const float *at = c->y + ((n * c->ob + block0 + j) * plane + i0) * BLOCK;
#pragma GCC unroll 24
        for (int p = 0; p < pixels; p++) {
            acc[p][j] = partial && p < count ? *(const v16 *)(at + p * BLOCK) : (v16){0};
        }
    }
}

/* A tile's partial sums into y as they are (more channel groups follow). */
static inline __attribute__((always_inline)) void
keep_tile(const ConvCall *c, v16 acc[MAX_TILE_PIXELS][QUAD_BLOCKS], idx n, idx block0, idx plane,
          idx i0, idx count, int pixels, int blocks)
{
#pragma GCC unroll 4
    for (int j = 0; j < blocks; j++) {
        float *at = c->y + ((n * c->ob + block0 + j) * plane + i0) * BLOCK;
#pragma GCC unroll 24
        for (int p = 0; p < pixels; p++) {
            if (p >= count) {
                break;
            }
            *(v16 *)(at + p * BLOCK) = acc[p][j];
        }
    }
}

/* A computed tile into y: + bias + z, then the activation `act` (a constant in each
 * caller), pixels [0, count). */
static inline __attribute__((always_inline)) void
store_tile(const ConvCall *c, v16 acc[MAX_TILE_PIXELS][QUAD_BLOCKS], idx n, idx block0, idx plane,
           idx i0, idx count, int pixels, int blocks, int act)
{
#pragma GCC unroll 4
    for (int j = 0; j < blocks; j++) {
        const idx block = block0 + j;
        const idx at = ((n * c->ob + block) * plane + i0) * BLOCK;
        const v16 bias = c->bias ? *(const v16 *)(c->bias + block * BLOCK) : (v16){0};
        /* constant bounds, so that acc stays in registers */
#pragma GCC unroll 24
        for (int p = 0; p < pixels; p++) {
            if (p >= count) {
                break;
            }
            v16 v = acc[p][j] + bias;
            if (c->z) {
                v += *(const v16 *)(c->z + at + p * BLOCK);
            }
            *(v16 *)(c->y + at + p * BLOCK) = activate16(v, act, c->p0, c->p1);
        }
    }
}

/* One tile of `pixels` x `blocks` at pixel i0 of the plane, `count` of its pixels real
 * (the rest recompute the last one and are not stored): channel groups [g0, g1), then
 * into y as partial sums (g1 < groups) or finished. */
static inline __attribute__((always_inline)) void
conv_one_tile(const ConvCall *c, idx n, idx block0, idx plane, idx i0, idx count, const float *w,
              idx g0, idx g1, int cg, int pixels, int blocks)
{
    const float *xi = c->x + n * c->ximage;
    idx poff[MAX_TILE_PIXELS];
    /* one division per tile, not one per pixel (~3% of a 32-channel pointwise layer) */
    idx orow = i0 / c->ow, ocol = i0 % c->ow;
    for (int p = 0; p < pixels; p++) {
        /* pixels past `count` recompute the last one (never stored) */
        poff[p] = orow * c->sh * c->xrow + ocol * c->sw * c->xpix;
        if (p + 1 < count && ++ocol == c->ow) {
            ocol = 0;
            orow++;
        }
    }
    /* evenly spaced windows (a run within one output row, or a 1x1 unpadded
     * convolution's plane) at stride 1 or 2 take the variants with constant offsets */
    idx step = pixels > 1 ? poff[1] - poff[0] : 0;
    for (int p = 2; p < pixels; p++) {
        step = poff[p] - poff[p - 1] == step ? step : -1;
    }
    v16 acc[MAX_TILE_PIXELS][QUAD_BLOCKS];
    start_tile(c, acc, g0 > 0, n, block0, plane, i0, count, pixels, blocks);
    if (step == cg) {
        conv_tile(c, xi, poff, w, cg, pixels, blocks, cg, g0, g1, acc);
    } else if (step == 2 * cg) {
        conv_tile(c, xi, poff, w, cg, pixels, blocks, 2 * cg, g0, g1, acc);
    } else {
        conv_tile(c, xi, poff, w, cg, pixels, blocks, 0, g0, g1, acc);
    }
    if (g1 < c->groups) {
        keep_tile(c, acc, n, block0, plane, i0, count, pixels, blocks);
        return;
    }
    /* one store loop per activation, so that its choice and constants leave the
     * loop (a switch per vector cost ~30% of a tile at 16 input channels) */
    switch (c->act) {
    case ACT_RELU:
        store_tile(c, acc, n, block0, plane, i0, count, pixels, blocks, ACT_RELU);
        break;
    case ACT_CLIP:
        store_tile(c, acc, n, block0, plane, i0, count, pixels, blocks, ACT_CLIP);
        break;
    case ACT_LEAKY:
        store_tile(c, acc, n, block0, plane, i0, count, pixels, blocks, ACT_LEAKY);
        break;
    default:
        store_tile(c, acc, n, block0, plane, i0, count, pixels, blocks, ACT_NONE);
        break;
    }
}

/* The tiles of work row `r` of image `n`, output blocks [4 quad + first, 4 quad + first +
 * blocks) of panel `quad`. A work row is a run of `row_pixels` consecutive pixels of the
 * output plane, across output rows: tiles of 6-24 pixels over rows of 7 or 14 would leave
 * much of the last tile of each row empty.
 *
 * Where a panel's filters are larger than a core's L2 (a 3x3 layer over 512 channels:
 * 1.2 MB), the input channels are taken `gchunk` groups at a time, all of the row's tiles
 * per chunk, the partial sums kept in y in between (as MLAS's NCHWc kernel accumulates
 * its output per block of input channels): each chunk's filters are then read from
 * memory once and stay in L2 across the row's tiles, where the whole panel was streamed
 * from L3 or memory again for every tile of 6 pixels (3x3, 512 channels at 7 x 7: 3.3-3.4
 * -> 2.7-2.9 ms for four layers). Smaller panels stay whole: there the partial sums' round
 * trips cost more than they save (3-13% slower at 14 x 14 to 56 x 56, measured). */
static inline __attribute__((always_inline)) void
conv_row_tiles(const ConvCall *c, idx n, idx quad, idx first, idx r, int cg, int pixels,
               int blocks)
{
    const float *w = c->w + quad * c->taps * c->groups * cg * QUAD + first * BLOCK;
    const idx block0 = QUAD_BLOCKS * quad + first;
    const idx plane = c->oh * c->ow, start = r * c->row_pixels;
    const idx width = plane - start < c->row_pixels ? plane - start : c->row_pixels;
    for (idx g0 = 0; g0 < c->groups; g0 += c->gchunk) {
        const idx g1 = c->groups - g0 < c->gchunk ? c->groups : g0 + c->gchunk;
        for (idx i0 = start; i0 < start + width; i0 += pixels) {
            const idx count = start + width - i0 < pixels ? start + width - i0 : pixels;
            /* a row's last tile of 1-3 pixels (7 x 7 planes: 49 = 8 x 6 + 1) as a
             * narrower tile: a 6-pixel one computed six pixels for one (~9% of those
             * layers' work) */
            if (pixels == 6 && count == 1) {
                conv_one_tile(c, n, block0, plane, i0, count, w, g0, g1, cg, 1, blocks);
            } else if (pixels == 6 && count <= 3) {
                conv_one_tile(c, n, block0, plane, i0, count, w, g0, g1, cg, 3, blocks);
            } else {
                conv_one_tile(c, n, block0, plane, i0, count, w, g0, g1, cg, pixels, blocks);
            }
        }
    }
}

/* Work row `r` of panel `quad`. With 32 registers of 16 floats (AVX-512) a tile holds up
 * to 24 accumulators: 6 x 4, 8 x 3, 12 x 2, 24 x 1 (16 x 1 was 1.45x slower on a
 * 32-channel pointwise layer: the tile's set-up and stores over fewer multiply-adds).
 * With 16 floats in two or four registers (AVX2: 16 of 8 floats; NEON: 32 of 4) those
 * tiles spill on every multiply-add (20-27x slower, measured with an AVX2 build on this
 * machine), so each block of the panel is computed on its own in tiles of 6 pixels: 6
 * accumulators, 12 AVX2 registers (2.3-3.9x the AVX-512 tiles' time; 2 x 2 and 3 x 2
 * tiles spilled as badly as the wide ones, 4 or 8 pixels were no faster overall). Even so
 * the NCHWc convolutions lose to OpenBLAS's AVX2 GEMMs there: the CPU provider offers
 * them only with AVX-512 (onyxrt_cpu.native.NCHWC_ENABLED). */
static inline __attribute__((always_inline)) void
conv_row(const ConvCall *c, idx n, idx quad, idx r, int cg)
{
    const idx blocks = c->ob - QUAD_BLOCKS * quad;
    if (!c->wide) {
        for (idx j = 0; j < blocks && j < QUAD_BLOCKS; j++) {
            conv_row_tiles(c, n, quad, j, r, cg, NARROW_TILE_PIXELS, 1);
        }
    } else if (blocks >= 4) {
        conv_row_tiles(c, n, quad, 0, r, cg, 6, 4);
    } else if (blocks == 3) {
        conv_row_tiles(c, n, quad, 0, r, cg, 8, 3);
    } else if (blocks == 2) {
        conv_row_tiles(c, n, quad, 0, r, cg, 12, 2);
    } else {
        conv_row_tiles(c, n, quad, 0, r, cg, 24, 1);
    }
}

static void
item_of(const ConvCall *c, idx item, idx *n, idx *panel, idx *r)
{
    if (c->rows_outer) {
        *panel = item % c->panels;
        item /= c->panels;
        *r = item % c->rows;
        *n = item / c->rows;
    } else {
        *r = item % c->rows;
        item /= c->rows;
        *panel = item % c->panels;
        *n = item / c->panels;
    }
}

MULTIVERSION static void
conv_rows_blocked(void *ctx, idx begin, idx end)
{
    const ConvCall *c = (const ConvCall *)ctx;
    for (idx i = begin; i < end; i++) {
        idx n, panel, r;
        item_of(c, i, &n, &panel, &r);
        conv_row(c, n, panel, r, BLOCK);
    }
}

MULTIVERSION static void
conv_rows_plain(void *ctx, idx begin, idx end)
{
    const ConvCall *c = (const ConvCall *)ctx;
    for (idx i = begin; i < end; i++) {
        idx n, panel, r;
        item_of(c, i, &n, &panel, &r);
        conv_row(c, n, panel, r, 1);
    }
}

/* The input with its padding made explicit: (N, G, hp, wp, cg) from (N, G, H, W, cg),
 * rows and columns [ph, ph + H) x [pw, pw + W) copied (clipped to hp x wp), zero
 * elsewhere. One item per (image, group). */
typedef struct {
    const float *x;
    float *dst;
    idx h, w, hp, wp, ph, pw, cg;
} PadCall;

static void
pad_items(void *ctx, idx begin, idx end)
{
    const PadCall *p = (const PadCall *)ctx;
    const idx src_plane = p->h * p->w * p->cg, dst_plane = p->hp * p->wp * p->cg;
    idx lo, hi;
    valid_range(p->wp, 1, -p->pw, p->w, &lo, &hi); /* dst columns with a source column */
    for (idx i = begin; i < end; i++) {
        const float *s = p->x + i * src_plane;
        float *d = p->dst + i * dst_plane;
        for (idx r = 0; r < p->hp; r++) {
            float *dr = d + r * p->wp * p->cg;
            const idx sr = r - p->ph;
            if (sr < 0 || sr >= p->h) {
                fill(dr, p->wp * p->cg, 0.0f);
                continue;
            }
            fill(dr, lo * p->cg, 0.0f);
            memcpy(dr + lo * p->cg, s + (sr * p->w + lo - p->pw) * p->cg,
                   sizeof(float) * (size_t)((hi - lo) * p->cg));
            fill(dr + hi * p->cg, (p->wp - hi) * p->cg, 0.0f);
        }
    }
}

/* y = act(conv(x, w) + bias + z). `blocked`: x is (N, G, H, W, 16), else NCHW with G = C.
 * `wide`: the AVX-512 tiles (see conv_row). Returns -1 when out of memory. */
static int
nchwc_conv(const float *x, int blocked, idx groups, const Geometry *g, const float *w, idx ob,
           const float *bias, const float *z, float *y, int act, float p0, float p1, int wide)
{
    const idx cg = blocked ? BLOCK : 1;
    /* the input extent the windows reach, padding included */
    const idx hp = (g->oh - 1) * g->sh + (g->kh - 1) * g->dh + 1;
    const idx wp = (g->ow - 1) * g->sw + (g->kw - 1) * g->dw + 1;
    if (g->n == 0 || g->oh <= 0 || g->ow <= 0 || ob == 0) {
        return 0;
    }
    float *padded = NULL;
    const float *src = x;
    idx h = g->h, wd = g->w;
    if (g->ph > 0 || g->pw > 0 || hp > g->h || wp > g->w) {
        padded = (float *)malloc(sizeof(float) * (size_t)(g->n * groups * hp * wp * cg));
        if (padded == NULL) {
            return -1;
        }
        PadCall pc = {x, padded, g->h, g->w, hp, wp, g->ph, g->pw, cg};
        parallel_for(pad_items, &pc, g->n * groups, 1 + MIN_PARALLEL_FLOATS / (hp * wp * cg));
        src = padded;
        h = hp;
        wd = wp;
    }
    idx *tapoff = (idx *)malloc(sizeof(idx) * (size_t)(g->kh * g->kw));
    if (tapoff == NULL) {
        free(padded);
        return -1;
    }
    const idx xpix = cg, xrow = wd * cg, gstride = blocked ? h * wd * BLOCK : h * wd;
    for (idx ky = 0; ky < g->kh; ky++) {
        for (idx kx = 0; kx < g->kw; kx++) {
            tapoff[ky * g->kw + kx] = ky * g->dh * xrow + kx * g->dw * xpix;
        }
    }
    const idx panels = (ob + QUAD_BLOCKS - 1) / QUAD_BLOCKS;
    const idx taps = g->kh * g->kw;
    ConvCall call = {src, groups, gstride, xrow, xpix, groups * h * wd * cg, tapoff, taps, w,
                     panels, ob, bias, z, y, g->n, g->oh, g->ow, g->sh, g->sw, act, p0, p1, 0, 0, 0,
                     wide, groups};
    /* channel groups per pass (see conv_row_tiles): filters of at most CHUNK_FILTER_BYTES
     * a pass (at least one group) where the panel's exceed CHUNK_PANEL_BYTES; not with a
     * residual z that shares y's memory (y holds partial sums in between) */
    const idx group_bytes = taps * cg * QUAD * (idx)sizeof(float), out = g->n * ob * g->oh * g->ow * BLOCK;
    const int z_in_y = z != NULL && z < y + out && y < z + out;
    if (wide && !z_in_y && group_bytes * groups > CHUNK_PANEL_BYTES) {
        call.gchunk = CHUNK_FILTER_BYTES / group_bytes > 1 ? CHUNK_FILTER_BYTES / group_bytes : 1;
    }
    /* Rows outside panels when all filters are smaller than one image's input (each row's
     * input is then read once, from cache, by every panel), panels outside rows otherwise
     * (a panel's filters stay in cache over its rows). */
    call.rows_outer = panels * taps * groups * cg * QUAD < groups * h * wd * cg;
    /* work rows: runs of ~72 pixels, a multiple of 24 (of every tile width), as
     * even as that allows */
    const idx plane = g->oh * g->ow, runs = (plane + 71) / 72;
    call.row_pixels = ((plane + runs - 1) / runs + 23) / 24 * 24;
    /* A small layer with few items (MobileNetV2's 1x1 layers at 7 x 7: 3 to 5 panels of
     * one row) left one thread idle for a third of it: rows of 24 pixels there. */
    if (g->n * panels * ((plane + call.row_pixels - 1) / call.row_pixels) < 16) {
        call.row_pixels = 24;
    }
    call.rows = (plane + call.row_pixels - 1) / call.row_pixels;
    const idx row_flops = 2 * call.row_pixels * QUAD * taps * groups * cg;
    /* chunks of about one work row: a row costs ~25 us at 64 channels, and in chunks of
     * four (parallel_for's) the last one left a thread idle for up to ~100 us of a
     * 500 us layer (two threads ran 3x3 layers 1.75x as fast as one, now ~2x) */
    parallel_for_chunked(blocked ? conv_rows_blocked : conv_rows_plain, &call, g->n * panels * call.rows,
                         1 + (1 << 19) / row_flops, 16);
    free(tapoff);
    free(padded);
    return 0;
}

/* ------------------------------------------------------------------------ depthwise */

typedef struct {
    const float *x, *w, *bias, *z;
    float *y;
    Geometry g;   /* g.c: blocks */
    int act;
    float p0, p1;
} DepthwiseCall;

/* Output columns [lo, hi) whose every tap lies inside the input row. */
static void
inside_columns(const Geometry *g, idx *lo, idx *hi)
{
    idx lo0, hi0, lo1, hi1;
    valid_range(g->ow, g->sw, -g->pw, g->w, &lo0, &hi0);
    valid_range(g->ow, g->sw, -g->pw + (g->kw - 1) * g->dw, g->w, &lo1, &hi1);
    *lo = lo0 > lo1 ? lo0 : lo1;
    *hi = hi0 < hi1 ? hi0 : hi1;
    if (*hi < *lo) {
        *hi = *lo;
    }
}

/* Output pixel `ow` of one row with bounds checks on every tap (the row's edges). */
static inline __attribute__((always_inline)) v16
depthwise_pixel(const Geometry *g, const float *xb, const float *wb, idx oh, idx ow, v16 acc)
{
    for (idx ky = 0; ky < g->kh; ky++) {
        const idx ih = oh * g->sh - g->ph + ky * g->dh;
        if (ih < 0 || ih >= g->h) {
            continue;
        }
        for (idx kx = 0; kx < g->kw; kx++) {
            const idx iw = ow * g->sw - g->pw + kx * g->dw;
            if (iw >= 0 && iw < g->w) {
                acc += *(const v16 *)(xb + (ih * g->w + iw) * BLOCK) *
                       *(const v16 *)(wb + (ky * g->kw + kx) * BLOCK);
            }
        }
    }
    return acc;
}

#define DW_TILE 4 /* output pixels computed together in a row's interior */

/* Output pixel `ow` of row yr: v + the residual (zr: its row, or NULL), activated. */
static inline __attribute__((always_inline)) void
depthwise_store(const DepthwiseCall *d, float *yr, const float *zr, idx ow, v16 v)
{
    if (zr) {
        v += *(const v16 *)(zr + ow * BLOCK);
    }
    *(v16 *)(yr + ow * BLOCK) = activate16(v, d->act, d->p0, d->p1);
}

/* DW_WIDE_TILE pixels of a 3x3, undilated row's interior at ow, stride `sw` 1 or 2 (a
 * constant in each caller): each input vector of a filter row is loaded once and used by
 * every tap that reads it (10 or 17 loads for 24 multiply-adds instead of 24 + 3), the
 * filter row in registers. */
#define DW_WIDE_TILE 8
static inline __attribute__((always_inline)) void
depthwise_tile3(const DepthwiseCall *d, const float *xb, const float *wb, idx oh, idx ow, v16 bias,
                int sw, v16 acc[DW_WIDE_TILE])
{
    const Geometry *g = &d->g;
#pragma GCC unroll 8
    for (int p = 0; p < DW_WIDE_TILE; p++) {
        acc[p] = bias;
    }
#pragma GCC unroll 3
    for (idx ky = 0; ky < 3; ky++) {
        const idx ih = oh * g->sh - g->ph + ky;
        if (ih < 0 || ih >= g->h) {
            continue;
        }
        const float *xr = xb + (ih * g->w + ow * sw - g->pw) * BLOCK;
        const v16 w0 = *(const v16 *)(wb + (ky * 3) * BLOCK);
        const v16 w1 = *(const v16 *)(wb + (ky * 3 + 1) * BLOCK);
        const v16 w2 = *(const v16 *)(wb + (ky * 3 + 2) * BLOCK);
        v16 xv[2 * DW_WIDE_TILE + 1];
#pragma GCC unroll 17
        for (int q = 0; q < sw * (DW_WIDE_TILE - 1) + 3; q++) {
            xv[q] = *(const v16 *)(xr + q * BLOCK);
        }
#pragma GCC unroll 8
        for (int p = 0; p < DW_WIDE_TILE; p++) {
            acc[p] += xv[sw * p] * w0;
            acc[p] += xv[sw * p + 1] * w1;
            acc[p] += xv[sw * p + 2] * w2;
        }
    }
}

/* One output row of one block, 16 channels at a time: the interior columns [lo, hi) in
 * tiles of DW_TILE pixels, each tap's filter vector loaded once per tile (for 3x3 the
 * taps unroll, `taps3`; undilated 3x3 at stride `wide_sw` 1 or 2 first takes wider
 * tiles that reuse each input vector across taps), the edges pixel by pixel with bounds
 * checks. Every path sums a pixel's taps in the same order (ky, kx), so results do not
 * depend on the path. */
static inline __attribute__((always_inline)) void
depthwise_row(const DepthwiseCall *d, idx item, idx lo, idx hi, int taps3, int wide_sw)
{
    const Geometry *g = &d->g;
    const idx kh = taps3 ? 3 : g->kh, kw = taps3 ? 3 : g->kw;
    const idx oh = item % g->oh, nb = item / g->oh, b = nb % g->c;
    const float *xb = d->x + nb * g->h * g->w * BLOCK;
    const float *wb = d->w + b * kh * kw * BLOCK;
    const v16 bias = d->bias ? *(const v16 *)(d->bias + b * BLOCK) : (v16){0};
    float *yr = d->y + (nb * g->oh + oh) * g->ow * BLOCK;
    const float *zr = d->z ? d->z + (nb * g->oh + oh) * g->ow * BLOCK : NULL;
    const idx step = g->sw * BLOCK;
    idx ow = 0;
    for (; ow < lo && ow < g->ow; ow++) {
        depthwise_store(d, yr, zr, ow, depthwise_pixel(g, xb, wb, oh, ow, bias));
    }
    if (wide_sw) {
        for (; ow + DW_WIDE_TILE <= hi; ow += DW_WIDE_TILE) {
            v16 acc[DW_WIDE_TILE];
            depthwise_tile3(d, xb, wb, oh, ow, bias, wide_sw, acc);
#pragma GCC unroll 8
            for (int p = 0; p < DW_WIDE_TILE; p++) {
                depthwise_store(d, yr, zr, ow + p, acc[p]);
            }
        }
    }
    for (; ow + DW_TILE <= hi; ow += DW_TILE) {
        v16 acc[DW_TILE];
        for (int p = 0; p < DW_TILE; p++) {
            acc[p] = bias;
        }
        for (idx ky = 0; ky < kh; ky++) {
            const idx ih = oh * g->sh - g->ph + ky * g->dh;
            if (ih < 0 || ih >= g->h) {
                continue;
            }
            const float *xr = xb + (ih * g->w + ow * g->sw - g->pw) * BLOCK;
#pragma GCC unroll 3
            for (idx kx = 0; kx < kw; kx++) {
                const v16 wv = *(const v16 *)(wb + (ky * kw + kx) * BLOCK);
                const float *xt = xr + kx * g->dw * BLOCK;
#pragma GCC unroll 4
                for (int p = 0; p < DW_TILE; p++) {
                    acc[p] += *(const v16 *)(xt + p * step) * wv;
                }
            }
        }
        for (int p = 0; p < DW_TILE; p++) {
            depthwise_store(d, yr, zr, ow + p, acc[p]);
        }
    }
    for (; ow < g->ow; ow++) {
        depthwise_store(d, yr, zr, ow, depthwise_pixel(g, xb, wb, oh, ow, bias));
    }
}

MULTIVERSION static void
depthwise_rows(void *ctx, idx begin, idx end)
{
    const DepthwiseCall *d = (const DepthwiseCall *)ctx;
    idx lo, hi;
    inside_columns(&d->g, &lo, &hi);
    const int taps3 = d->g.kh == 3 && d->g.kw == 3;
    const int undilated3 = taps3 && d->g.dh == 1 && d->g.dw == 1 && d->g.sh == d->g.sw;
    for (idx item = begin; item < end; item++) {
        if (undilated3 && d->g.sw == 1) {
            depthwise_row(d, item, lo, hi, 1, 1);
        } else if (undilated3 && d->g.sw == 2) {
            depthwise_row(d, item, lo, hi, 1, 2);
        } else if (taps3) {
            depthwise_row(d, item, lo, hi, 1, 0);
        } else {
            depthwise_row(d, item, lo, hi, 0, 0);
        }
    }
}

/* ------------------------------------------------------------------------- max pool */

typedef struct {
    const float *x;
    float *y;
    Geometry g; /* g.c: blocks */
} PoolCall;

/* Output rows of one block: the max over each window's taps inside the input (padding
 * and ceil-mode overhang count as -inf), NaN propagating as numpy's maximum does. */
MULTIVERSION static void
maxpool_rows(void *ctx, idx begin, idx end)
{
    const PoolCall *pc = (const PoolCall *)ctx;
    const Geometry *g = &pc->g;
    for (idx item = begin; item < end; item++) {
        const idx oh = item % g->oh, nb = item / g->oh;
        const float *xb = pc->x + nb * g->h * g->w * BLOCK;
        float *yr = pc->y + (nb * g->oh + oh) * g->ow * BLOCK;
        for (idx ow = 0; ow < g->ow; ow++) {
            v16 best = (v16){0} - INFINITY;
            i16v nans = {0};
            for (idx ky = 0; ky < g->kh; ky++) {
                const idx ih = oh * g->sh - g->ph + ky * g->dh;
                if (ih < 0 || ih >= g->h) {
                    continue;
                }
                for (idx kx = 0; kx < g->kw; kx++) {
                    const idx iw = ow * g->sw - g->pw + kx * g->dw;
                    if (iw >= 0 && iw < g->w) {
                        const v16 v = *(const v16 *)(xb + (ih * g->w + iw) * BLOCK);
                        best = select16(v > best, v, best);
                        /* NaNs tested on the bits, apart: GCC scalarizes v != v, and
                         * (v > best) | nan */
                        nans |= ((i16v)v & 0x7fffffff) > 0x7f800000;
                    }
                }
            }
            *(v16 *)(yr + ow * BLOCK) = select16(nans, (v16){0} + NAN, best);
        }
    }
}

#ifdef HAVE_AVX512_INTRINSICS
/* Taps [lo, hi) of `taps` (dilation `dil`) from input position `origin` that fall inside
 * [0, size): a window's taps over the padding are skipped as a range, not tested one by
 * one. */
static inline void
taps_inside(idx origin, idx dil, idx taps, idx size, idx *lo, idx *hi)
{
    idx a = 0, b = taps;
    while (a < b && origin + a * dil < 0) {
        a++;
    }
    while (b > a && origin + (b - 1) * dil >= size) {
        b--;
    }
    *lo = a;
    *hi = b;
}

/* maxpool_rows with AVX-512 intrinsics, for the same bits: a tap's max is vmaxps(v, best)
 * (what `v > best ? v : best` means, -0/+0 included), its NaN test one compare into a
 * mask register, and each window's taps inside the input found once per window instead
 * of tested per tap. The generic vectors above compile the NaN test and the select to
 * ~10 instructions a tap (ResNet-50's 3x3/2 pool over [1, 64, 112, 112]: 140 us, against
 * onnxruntime's 44). */
__attribute__((target("avx512f"))) static void
maxpool_rows_avx512(void *ctx, idx begin, idx end)
{
    const PoolCall *pc = (const PoolCall *)ctx;
    const Geometry *g = &pc->g;
    const __m512 lowest = _mm512_set1_ps(-INFINITY), nan = _mm512_set1_ps(NAN);
    for (idx item = begin; item < end; item++) {
        const idx oh = item % g->oh, nb = item / g->oh;
        const float *xb = pc->x + nb * g->h * g->w * BLOCK;
        float *yr = pc->y + (nb * g->oh + oh) * g->ow * BLOCK;
        idx ky0, ky1;
        taps_inside(oh * g->sh - g->ph, g->dh, g->kh, g->h, &ky0, &ky1);
        for (idx ow = 0; ow < g->ow; ow++) {
            const idx iw0 = ow * g->sw - g->pw;
            idx kx0, kx1;
            taps_inside(iw0, g->dw, g->kw, g->w, &kx0, &kx1);
            __m512 best = lowest;
            __mmask16 nans = 0;
            for (idx ky = ky0; ky < ky1; ky++) {
                const float *xr = xb + ((oh * g->sh - g->ph + ky * g->dh) * g->w + iw0) * BLOCK;
                for (idx kx = kx0; kx < kx1; kx++) {
                    const __m512 v = _mm512_loadu_ps(xr + kx * g->dw * BLOCK);
                    nans |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
                    best = _mm512_max_ps(v, best);
                }
            }
            _mm512_storeu_ps(yr + ow * BLOCK, _mm512_mask_mov_ps(best, nans, nan));
        }
    }
}
#endif

/* --------------------------------------------------------------- global average pool */

typedef struct {
    const float *x;
    float *y;
    idx plane;
} MeanCall;

/* y[i] = the mean of the `plane` vectors of block-plane i, summed in 4 running partial
 * sums (a plane of 56 x 56 in one float32 sum would lose ~3 digits). */
MULTIVERSION static void
mean_items(void *ctx, idx begin, idx end)
{
    const MeanCall *m = (const MeanCall *)ctx;
    for (idx i = begin; i < end; i++) {
        const float *x = m->x + i * m->plane * BLOCK;
        v16 part[4] = {{0}, {0}, {0}, {0}};
        idx p = 0;
        for (; p + 4 <= m->plane; p += 4) {
            for (int k = 0; k < 4; k++) {
                part[k] += *(const v16 *)(x + (p + k) * BLOCK);
            }
        }
        for (; p < m->plane; p++) {
            part[0] += *(const v16 *)(x + p * BLOCK);
        }
        const v16 sum = (part[0] + part[1]) + (part[2] + part[3]);
        *(v16 *)(m->y + i * BLOCK) = sum / (float)m->plane;
    }
}

/* ------------------------------------------------------------------------- reorders */

typedef struct {
    const float *src;
    float *dst;
    idx c, blocks, plane;
} ReorderCall;

/* Item i of a reorder, one (image, block): the lanes it holds (16 but in a last block of
 * fewer channels), and where its channels start in the NCHW tensor and its block in the
 * blocked one. */
static inline idx
reorder_item(const ReorderCall *r, idx i, idx *plain, idx *blocked)
{
    const idx n = i / r->blocks, b = i % r->blocks;
    *plain = (n * r->c + b * BLOCK) * r->plane;
    *blocked = i * r->plane * BLOCK;
    return r->c - b * BLOCK < BLOCK ? r->c - b * BLOCK : BLOCK;
}

/* NCHW -> NCHWc, pixels [first, plane) of item i: lanes past C are zero. */
static inline void
to_blocked_from(const ReorderCall *r, idx i, idx first)
{
    idx plain, blocked;
    const idx lanes = reorder_item(r, i, &plain, &blocked);
    const float *s = r->src + plain;
    float *d = r->dst + blocked;
    for (idx p0 = first; p0 < r->plane; p0 += BLOCK) {
        const idx pe = r->plane - p0 < BLOCK ? r->plane - p0 : BLOCK;
        for (idx l = 0; l < BLOCK; l++) {
            const float *sl = s + l * r->plane + p0;
            for (idx p = 0; p < pe; p++) {
                d[(p0 + p) * BLOCK + l] = l < lanes ? sl[p] : 0.0f;
            }
        }
    }
}

/* NCHWc -> NCHW, pixels [first, plane) of item i: lanes past C dropped. Sixteen pixels at
 * a time: their 16 x 16 floats read once, contiguously, then written as 16 runs of 16,
 * one per channel (reading each channel's lane across the whole plane, 64 bytes apart,
 * took every cache line of the block once per channel: 95 us for [1, 32, 112, 112],
 * onnxruntime 23). */
static inline void
from_blocked_from(const ReorderCall *r, idx i, idx first)
{
    float tile[BLOCK * BLOCK];
    idx plain, blocked;
    const idx lanes = reorder_item(r, i, &plain, &blocked);
    const float *s = r->src + blocked;
    float *d = r->dst + plain;
    for (idx p0 = first; p0 < r->plane; p0 += BLOCK) {
        const idx pe = r->plane - p0 < BLOCK ? r->plane - p0 : BLOCK;
        memcpy(tile, s + p0 * BLOCK, sizeof(float) * (size_t)(pe * BLOCK));
        for (idx l = 0; l < lanes; l++) {
            float *dl = d + l * r->plane + p0;
            for (idx p = 0; p < pe; p++) {
                dl[p] = tile[p * BLOCK + l];
            }
        }
    }
}

static void
to_blocked(void *ctx, idx begin, idx end)
{
    for (idx i = begin; i < end; i++) {
        to_blocked_from((const ReorderCall *)ctx, i, 0);
    }
}

static void
from_blocked(void *ctx, idx begin, idx end)
{
    for (idx i = begin; i < end; i++) {
        from_blocked_from((const ReorderCall *)ctx, i, 0);
    }
}

#ifdef HAVE_AVX512_INTRINSICS
/* Sixteen rows of 16 floats (row i at src + i * sstride; rows at or past `rows` read as
 * zeros) transposed: output row j, column i = input row i, column j, rows [0, keep)
 * stored at dst + j * dstride. Interleaves of pairs of floats, then of pairs of
 * doubles, then two shuffles of 128-bit lanes. */
__attribute__((target("avx512f"))) static inline void
transpose16(const float *src, idx sstride, idx rows, float *dst, idx dstride, idx keep)
{
    __m512 r[16], a[16], b[16];
    for (int i = 0; i < 16; i++) {
        r[i] = i < rows ? _mm512_loadu_ps(src + i * sstride) : _mm512_setzero_ps();
    }
    for (int i = 0; i < 16; i += 2) {
        a[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        a[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int j = 0; j < 16; j += 4) {
        const __m512d a0 = _mm512_castps_pd(a[j]), a1 = _mm512_castps_pd(a[j + 1]);
        const __m512d a2 = _mm512_castps_pd(a[j + 2]), a3 = _mm512_castps_pd(a[j + 3]);
        /* b[j + m], 128-bit lane k: column 4k + m of rows j .. j + 3 */
        b[j] = _mm512_castpd_ps(_mm512_unpacklo_pd(a0, a2));
        b[j + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a0, a2));
        b[j + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(a1, a3));
        b[j + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(a1, a3));
    }
    for (int m = 0; m < 4; m++) {
        const __m512 u01 = _mm512_shuffle_f32x4(b[m], b[4 + m], _MM_SHUFFLE(1, 0, 1, 0));
        const __m512 u23 = _mm512_shuffle_f32x4(b[m], b[4 + m], _MM_SHUFFLE(3, 2, 3, 2));
        const __m512 v01 = _mm512_shuffle_f32x4(b[8 + m], b[12 + m], _MM_SHUFFLE(1, 0, 1, 0));
        const __m512 v23 = _mm512_shuffle_f32x4(b[8 + m], b[12 + m], _MM_SHUFFLE(3, 2, 3, 2));
        const __m512 out[4] = {_mm512_shuffle_f32x4(u01, v01, _MM_SHUFFLE(2, 0, 2, 0)),
                               _mm512_shuffle_f32x4(u01, v01, _MM_SHUFFLE(3, 1, 3, 1)),
                               _mm512_shuffle_f32x4(u23, v23, _MM_SHUFFLE(2, 0, 2, 0)),
                               _mm512_shuffle_f32x4(u23, v23, _MM_SHUFFLE(3, 1, 3, 1))};
        for (int k = 0; k < 4; k++) {
            if (4 * k + m < keep) {
                _mm512_storeu_ps(dst + (4 * k + m) * dstride, out[k]);
            }
        }
    }
}

/* to_blocked and from_blocked with whole 16 x 16 tiles transposed in registers (the
 * scalar loops: [1, 64, 56, 56] 81-106 us in, [1, 256, 56, 56] 235-312 us out against
 * onnxruntime's 27-33 and 85-100); a plane's last pixels (fewer than 16) as there. */
__attribute__((target("avx512f"))) static inline void
reorder_avx512(const ReorderCall *r, idx begin, idx end, int to_nchwc)
{
    for (idx i = begin; i < end; i++) {
        idx plain, blocked, p0 = 0;
        const idx lanes = reorder_item(r, i, &plain, &blocked);
        for (; p0 + BLOCK <= r->plane; p0 += BLOCK) {
            if (to_nchwc) {
                transpose16(r->src + plain + p0, r->plane, lanes, r->dst + blocked + p0 * BLOCK, BLOCK, BLOCK);
            } else {
                transpose16(r->src + blocked + p0 * BLOCK, BLOCK, BLOCK, r->dst + plain + p0, r->plane, lanes);
            }
        }
        if (to_nchwc) {
            to_blocked_from(r, i, p0);
        } else {
            from_blocked_from(r, i, p0);
        }
    }
}

__attribute__((target("avx512f"))) static void
to_blocked_avx512(void *ctx, idx begin, idx end)
{
    reorder_avx512((const ReorderCall *)ctx, begin, end, 1);
}

__attribute__((target("avx512f"))) static void
from_blocked_avx512(void *ctx, idx begin, idx end)
{
    reorder_avx512((const ReorderCall *)ctx, begin, end, 0);
}
#endif

/* ---------------------------------------------------------------- Python entry points */

PyObject *
py_nchwc_conv(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *xo, *wo, *yo, *geo, *bo = Py_None, *zo = Py_None;
    int blocked, act = ACT_NONE, wide = -1;
    idx groups, ob;
    float p0 = 0.0f, p1 = 0.0f;
    if (!PyArg_ParseTuple(args, "OpnOOnO|OOiffi", &xo, &blocked, &groups, &geo, &wo, &ob, &yo, &bo,
                          &zo, &act, &p0, &p1, &wide)) {
        return NULL;
    }
    if (wide < 0) {
        wide = cpu_has_avx512();
    }
    Geometry g;
    if (parse_geometry(geo, &g) < 0 || check_activation(act) < 0 ||
        check_positive("groups", groups, 1) < 0 || check_positive("output blocks", ob, 1) < 0 ||
        check_positive("leading pad", g.ph, 0) < 0 || check_positive("leading pad", g.pw, 0) < 0) {
        return NULL;
    }
    const idx cg = blocked ? BLOCK : 1;
    const idx out = g.n * ob * g.oh * g.ow * BLOCK;
    enum { X, W, Y, B, Z, VIEWS };
    Py_buffer v[VIEWS];
    memset(v, 0, sizeof(v));
    int ok = get_f32(xo, &v[X], 0, g.n * groups * g.h * g.w * cg, "x") == 0;
    ok = ok && get_f32(wo, &v[W], 0, (ob + QUAD_BLOCKS - 1) / QUAD_BLOCKS * g.kh * g.kw * groups * cg * QUAD, "filters") == 0;
    ok = ok && get_f32(yo, &v[Y], 1, out, "y") == 0;
    ok = ok && get_optional_f32(bo, &v[B], ob * BLOCK, "bias") == 0;
    ok = ok && get_optional_f32(zo, &v[Z], zo == Py_None ? 0 : out, "z") == 0;
    int rc = 0;
    if (ok) {
        Py_BEGIN_ALLOW_THREADS
        rc = nchwc_conv((const float *)v[X].buf, blocked, groups, &g, (const float *)v[W].buf, ob,
                        (const float *)v[B].buf, (const float *)v[Z].buf, (float *)v[Y].buf, act, p0,
                        p1, wide);
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

PyObject *
py_nchwc_depthwise(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *xo, *wo, *yo, *geo, *bo = Py_None, *zo = Py_None;
    int act = ACT_NONE;
    float p0 = 0.0f, p1 = 0.0f;
    if (!PyArg_ParseTuple(args, "OOOO|OOiff", &xo, &wo, &yo, &geo, &bo, &zo, &act, &p0, &p1)) {
        return NULL;
    }
    DepthwiseCall d;
    if (parse_geometry(geo, &d.g) < 0 || check_activation(act) < 0) {
        return NULL;
    }
    const Geometry *g = &d.g; /* g->c counts blocks */
    const idx out = g->n * g->c * g->oh * g->ow * BLOCK;
    enum { X, W, Y, B, Z, VIEWS };
    Py_buffer v[VIEWS];
    memset(v, 0, sizeof(v));
    int ok = get_f32(xo, &v[X], 0, g->n * g->c * g->h * g->w * BLOCK, "x") == 0;
    ok = ok && get_f32(wo, &v[W], 0, g->c * g->kh * g->kw * BLOCK, "filters") == 0;
    ok = ok && get_f32(yo, &v[Y], 1, out, "y") == 0;
    ok = ok && get_optional_f32(bo, &v[B], g->c * BLOCK, "bias") == 0;
    ok = ok && get_optional_f32(zo, &v[Z], zo == Py_None ? 0 : out, "z") == 0;
    if (ok) {
        d.x = (const float *)v[X].buf;
        d.w = (const float *)v[W].buf;
        d.bias = (const float *)v[B].buf;
        d.z = (const float *)v[Z].buf;
        d.y = (float *)v[Y].buf;
        d.act = act;
        d.p0 = p0;
        d.p1 = p1;
        Py_BEGIN_ALLOW_THREADS
        parallel_for(depthwise_rows, &d, g->n * g->c * g->oh,
                     1 + MIN_PARALLEL_FLOATS / (g->ow * BLOCK * g->kh * g->kw + 1));
        Py_END_ALLOW_THREADS
    }
    release_all(v, VIEWS);
    if (!ok) {
        return NULL;
    }
    Py_RETURN_NONE;
}

PyObject *
py_nchwc_reorder(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *so, *dso;
    idx n, c, plane;
    int to_nchwc;
    if (!PyArg_ParseTuple(args, "OOnnnp", &so, &dso, &n, &c, &plane, &to_nchwc)) {
        return NULL;
    }
    if (check_positive("N", n, 0) < 0 || check_positive("C", c, 1) < 0 ||
        check_positive("plane", plane, 0) < 0) {
        return NULL;
    }
    const idx blocks = (c + BLOCK - 1) / BLOCK;
    const idx plain = n * c * plane, blocked = n * blocks * plane * BLOCK;
    enum { S, D, VIEWS };
    Py_buffer v[VIEWS];
    memset(v, 0, sizeof(v));
    if (get_f32(so, &v[S], 0, to_nchwc ? plain : blocked, "source") < 0 ||
        get_f32(dso, &v[D], 1, to_nchwc ? blocked : plain, "destination") < 0) {
        release_all(v, VIEWS);
        return NULL;
    }
    ReorderCall r = {(const float *)v[S].buf, (float *)v[D].buf, c, blocks, plane};
    Py_BEGIN_ALLOW_THREADS
    RangeFn reorder = to_nchwc ? to_blocked : from_blocked;
#ifdef HAVE_AVX512_INTRINSICS
    if (cpu_has_avx512()) {
        reorder = to_nchwc ? to_blocked_avx512 : from_blocked_avx512;
    }
#endif
    parallel_for(reorder, &r, n * blocks,
                 1 + MIN_PARALLEL_FLOATS / (plane * BLOCK + 1));
    Py_END_ALLOW_THREADS
    release_all(v, VIEWS);
    Py_RETURN_NONE;
}

PyObject *
py_nchwc_maxpool(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *xo, *yo, *geo;
    if (!PyArg_ParseTuple(args, "OOO", &xo, &yo, &geo)) {
        return NULL;
    }
    PoolCall pc;
    if (parse_geometry(geo, &pc.g) < 0) {
        return NULL;
    }
    const Geometry *g = &pc.g; /* g->c counts blocks */
    enum { X, Y, VIEWS };
    Py_buffer v[VIEWS];
    memset(v, 0, sizeof(v));
    if (get_f32(xo, &v[X], 0, g->n * g->c * g->h * g->w * BLOCK, "x") < 0 ||
        get_f32(yo, &v[Y], 1, g->n * g->c * g->oh * g->ow * BLOCK, "y") < 0) {
        release_all(v, VIEWS);
        return NULL;
    }
    pc.x = (const float *)v[X].buf;
    pc.y = (float *)v[Y].buf;
    Py_BEGIN_ALLOW_THREADS
    RangeFn rows = maxpool_rows;
#ifdef HAVE_AVX512_INTRINSICS
    if (cpu_has_avx512()) {
        rows = maxpool_rows_avx512;
    }
#endif
    parallel_for(rows, &pc, g->n * g->c * g->oh,
                 1 + MIN_PARALLEL_FLOATS / (g->ow * BLOCK * g->kh * g->kw + 1));
    Py_END_ALLOW_THREADS
    release_all(v, VIEWS);
    Py_RETURN_NONE;
}

PyObject *
py_nchwc_mean(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *xo, *yo;
    idx items, plane;
    if (!PyArg_ParseTuple(args, "OOnn", &xo, &yo, &items, &plane)) {
        return NULL;
    }
    if (check_positive("items", items, 0) < 0 || check_positive("plane", plane, 1) < 0) {
        return NULL;
    }
    enum { X, Y, VIEWS };
    Py_buffer v[VIEWS];
    memset(v, 0, sizeof(v));
    if (get_f32(xo, &v[X], 0, items * plane * BLOCK, "x") < 0 ||
        get_f32(yo, &v[Y], 1, items * BLOCK, "y") < 0) {
        release_all(v, VIEWS);
        return NULL;
    }
    MeanCall m = {(const float *)v[X].buf, (float *)v[Y].buf, plane};
    Py_BEGIN_ALLOW_THREADS
    parallel_for(mean_items, &m, items, 1 + MIN_PARALLEL_FLOATS / (plane * BLOCK));
    Py_END_ALLOW_THREADS
    release_all(v, VIEWS);
    Py_RETURN_NONE;
}
