// float8 / MXFP8 matmuls emulated exactly on the CPU: decode the 8-bit codes into bf16 or fp32
// tiles (exact), multiply with ct_gemm_bf16 / ct_gemm (exact products, fp32 sums), then apply the
// scales. Why this is the GPU's arithmetic: kernels/cpu/gemm_f8.h.
#include "kernels/cpu/gemm_f8.h"

#include <float.h>
#include <math.h>
#include <omp.h>
#include <string.h>

#include "core/float_formats.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/kernels.h"

#define PAR_MIN 65536  // elements below which a loop stays serial (thread start-up dominates)

// Whether a loop over n elements runs on the team. Serial loops are plain loops, not
// `parallel for if (...)`: libgomp allocates and frees a team for every region that runs on one
// thread (an `if` clause that is false, one thread, a region nested in another); only a team of
// several is kept for the next region. Branching here keeps a steady step free of allocations.
static int par(long n) { return n > PAR_MIN && omp_get_max_threads() > 1 && !omp_in_parallel(); }

static int g_test_path;  // 0 auto, 1 fp32, 2 bf16
void ct_gemm_f8_test_path(int path) { g_test_path = path; }

// bf16 tiles only pay where oneDNN has a real bf16 kernel (AMX, AVX-512 BF16); elsewhere
// ct_gemm_bf16 would widen the tiles to fp32 again, so decode straight to fp32.
static int use_bf16(void) {
    if (g_test_path) return g_test_path == 2;
    return strcmp(ct_bf16_gemm_path(), "fallback") != 0;
}

// The 256 values of a format as fp32 and as bf16 bits: 256 decodes per call, nothing next to
// a gemm, and no shared state to initialise across threads.
typedef struct {
    float f[256];
    uint16_t h[256];
} lut;
static void lut_init(lut *t, ct_dtype fmt) {
    for (int i = 0; i < 256; i++) {
        t->f[i] = ct_f8_to_f32((uint8_t)i, fmt);
        t->h[i] = ct_f32_to_bf16(t->f[i]);  // exact: every e4m3 / e5m2 value is a bf16 value
    }
}

static void mm(int bf, int ta, int tb, long M, long N, long K, const void *A, long lda, const void *B, long ldb,
               float beta, float *C, long ldc) {
    // alpha stays 1: see ct_gemm_f8_scratch_floats in the header.
    if (bf)
        ct_gemm_bf16(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
    else
        ct_gemm(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
}

long ct_gemm_f8_scratch_floats(long M, long N, long K, int with_beta) {
    return M * K + K * N + (with_beta ? M * N : 0);
}

// rows x cols codes with leading dimension ld -> packed (ld = cols) values, bf16 bits or fp32.
static void decode_row(void *dst, int bf, const uint8_t *src, long r, long cols, long ld, const lut *t) {
    const uint8_t *s = src + r * ld;
    if (bf) {
        uint16_t *d = (uint16_t *)dst + r * cols;
        for (long c = 0; c < cols; c++) d[c] = t->h[s[c]];
    } else {
        float *d = (float *)dst + r * cols;
        for (long c = 0; c < cols; c++) d[c] = t->f[s[c]];
    }
}
static void decode(void *dst, int bf, const uint8_t *src, long rows, long cols, long ld, const lut *t) {
    if (par(rows * cols)) {
#pragma omp parallel for schedule(static)
        for (long r = 0; r < rows; r++) decode_row(dst, bf, src, r, cols, ld, t);
    } else {
        for (long r = 0; r < rows; r++) decode_row(dst, bf, src, r, cols, ld, t);
    }
}

// Row m of the epilogue: C[m, :] = acc[m, :] * ((1/s_a) * (1/s_b)) (+ beta C[m, :]).
static void scale_row(float *C, long ldc, const float *acc, long ld_acc, long m, long N, const float *scale_a,
                      const float *scale_b, int rowwise, float beta) {
    float ia = 1.0f / scale_a[rowwise ? m : 0], inv_b0 = 1.0f / scale_b[0];
    const float *s = acc + m * ld_acc;
    float *c = C + m * ldc;
    for (long n = 0; n < N; n++) {
        float v = s[n] * (ia * (rowwise ? 1.0f / scale_b[n] : inv_b0));
        c[n] = beta == 0.0f ? v : v + beta * c[n];
    }
}

void ct_gemm_f8(int trans_a, int trans_b, long M, long N, long K, const uint8_t *A, long lda, ct_dtype fmt_a,
                const float *scale_a, const uint8_t *B, long ldb, ct_dtype fmt_b, const float *scale_b, int rowwise,
                float beta, float *C, long ldc, float *scratch) {
    if (M <= 0 || N <= 0) return;
    if (K < 0) K = 0;
    long ar = trans_a ? K : M, ac = trans_a ? M : K, br = trans_b ? N : K, bc = trans_b ? K : N;
    int bf = use_bf16();
    lut la, lb;
    lut_init(&la, fmt_a);
    lut_init(&lb, fmt_b);
    void *da = scratch, *db = bf ? (void *)((uint16_t *)scratch + M * K) : (void *)(scratch + M * K);
    decode(da, bf, A, ar, ac, lda, &la);
    decode(db, bf, B, br, bc, ldb, &lb);
    // acc = sum_k a_q b_q, exact products summed in fp32: straight into C unless beta needs C0.
    float *acc = beta != 0.0f ? scratch + M * K + K * N : C;
    long ld_acc = beta != 0.0f ? N : ldc;
    mm(bf, trans_a, trans_b, M, N, K, da, ac, db, bc, 0.0f, acc, ld_acc);
    // Scales after the sum, as the GPU's epilogue: acc * ((1/s_a) * (1/s_b)) (torchao passes the
    // reciprocals), then + beta C0. Rowwise scales index the output's row and column.
    if (par(M * N)) {
#pragma omp parallel for schedule(static)
        for (long m = 0; m < M; m++) scale_row(C, ldc, acc, ld_acc, m, N, scale_a, scale_b, rowwise, beta);
    } else {
        for (long m = 0; m < M; m++) scale_row(C, ldc, acc, ld_acc, m, N, scale_a, scale_b, rowwise, beta);
    }
}

// Dequantised MX rows (rows, K): element * 2^X per block (exact in fp32, see the header); bf16
// bits are the same value rounded, exact unless it is a bf16 subnormal (mx_needs_fp32 rules
// that out before the bf16 path is taken).
static void decode_mx_row(void *dst, int bf, const uint8_t *q, const uint8_t *scales, long r, long K, const lut *t) {
    long nb = ct_mx_nblocks(K);
    for (long b = 0; b < nb; b++) {
        float x = ct_e8m0_to_f32(scales[r * nb + b]);  // NaN scale: the block decodes to NaN
        long k0 = b * CT_MX_BLOCK, k1 = k0 + CT_MX_BLOCK < K ? k0 + CT_MX_BLOCK : K;
        for (long k = k0; k < k1; k++) {
            float v = t->f[q[r * K + k]] * x;
            if (bf)
                ((uint16_t *)dst)[r * K + k] = ct_f32_to_bf16(v);
            else
                ((float *)dst)[r * K + k] = v;
        }
    }
}
static void decode_mx(void *dst, int bf, const uint8_t *q, const uint8_t *scales, long rows, long K, const lut *t) {
    if (par(rows * K)) {
#pragma omp parallel for schedule(static)
        for (long r = 0; r < rows; r++) decode_mx_row(dst, bf, q, scales, r, K, t);
    } else {
        for (long r = 0; r < rows; r++) decode_mx_row(dst, bf, q, scales, r, K, t);
    }
}

// Does any dequantised element fall below fp32's (= bf16's) normal range? Only blocks with a
// scale under 2^(-126 - emin_sub) can, e8m0 bits 10 (e4m3, smallest subnormal 2^-9) or 17 (e5m2,
// 2^-16); bf16 would round such values to its 7-bit subnormals and AMX flushes them.
static int mx_needs_fp32(const uint8_t *q, const uint8_t *scales, long rows, long K, const lut *t, ct_dtype fmt) {
    long nb = ct_mx_nblocks(K);
    uint8_t thr = fmt == CT_F8_E4M3 ? 10 : 17;
    for (long r = 0; r < rows; r++)
        for (long b = 0; b < nb; b++) {
            if (scales[r * nb + b] >= thr) continue;
            float x = ct_e8m0_to_f32(scales[r * nb + b]);
            long k0 = b * CT_MX_BLOCK, k1 = k0 + CT_MX_BLOCK < K ? k0 + CT_MX_BLOCK : K;
            for (long k = k0; k < k1; k++) {
                float v = fabsf(t->f[q[r * K + k]] * x);
                if (v != 0.0f && v < FLT_MIN) return 1;
            }
        }
    return 0;
}

void ct_gemm_mxfp8(long M, long N, long K, const uint8_t *A, const uint8_t *scale_a, ct_dtype fmt_a, const uint8_t *B,
                   const uint8_t *scale_b, ct_dtype fmt_b, float beta, float *C, float *scratch) {
    if (M <= 0 || N <= 0) return;
    if (K < 0) K = 0;
    lut la, lb;
    lut_init(&la, fmt_a);
    lut_init(&lb, fmt_b);
    int bf = use_bf16() && !mx_needs_fp32(A, scale_a, M, K, &la, fmt_a) && !mx_needs_fp32(B, scale_b, N, K, &lb, fmt_b);
    void *da = scratch, *db = bf ? (void *)((uint16_t *)scratch + M * K) : (void *)(scratch + M * K);
    decode_mx(da, bf, A, scale_a, M, K, &la);
    decode_mx(db, bf, B, scale_b, N, K, &lb);
    // The scales are already in the elements, so beta C0 can go through the gemm itself.
    mm(bf, 0, 1, M, N, K, da, K, db, K, beta, C, N);
}
