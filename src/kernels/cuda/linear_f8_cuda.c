// The float8 / MXFP8 table members of the cuda backend: quantisation on the device (f8.cu, the
// casts of core/float_formats.h bit for bit) and the products through cuBLASLt (blas_cuda.c).
// Contracts and recipes: kernels/cpu/gemm_f8.h and kernels/cpu/linear_f8.h; each step below is
// the cpu's step of the same name, so codes and scales are the cpu's and the results differ from
// the cpu's only by fp32 summation order:
//   float8 (tensorwise, rowwise): the codes are cast straight into the layout cuBLASLt's fp8
//     kernels take (K contiguous, padded to 16 with zero codes, which add exact zeros), the
//     product is taken with unit scales in fp32, and ct_cuda_f8_epilogue applies the scales as
//     the cpu does (blas_cuda.c says why not through scale pointers).
//   MXFP8: sm_90's cuBLASLt has no e8m0 block-scaled mode (CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0
//     is Blackwell's), so each operand is quantised and decoded again on the device, element code
//     times 2^X, which is exact in fp32 (gemm_f8.h), and multiplied by the fp32 cuBLASLt product
//     (true fp32 products of those values, no TF32). A bf16 product would be faster and is exact
//     too except for dequantised values below fp32's normal range, which the cpu finds by a scan
//     on the host; the device would need that answer on the host before choosing, so it takes
//     the path that is exact for every input.
// Under tensor parallel the amaxes are agreed on in device memory through split->amax_max between
// the amax and the scale kernels, as the cpu does between its passes.
//
// Scratch: the codes and scales of the operands of one product, and its fp32 result before the
// scales (the cpu's decoded fp32 / bf16 tiles and widened bf16 input are not needed: the casts
// read bf16 and fp32 inputs directly). MXFP8 needs the two decoded operands instead. Every region
// starts 256 bytes apart from the (256-aligned) start, the alignment cuBLASLt's heuristic assumes.
#include <stdint.h>

#include "core/error.h"
#include "core/float_formats.h"
#include "core/mathutil.h"
#include "kernels/cuda/backend_cuda.h"
#include "kernels/cuda/cuda_kernels.h"

#define GRAD_FMT CT_F8_E5M2  // the gradient's format in every recipe (kernels/cpu/linear_f8.h)
enum { ALIGN_FLOATS = 64 };  // 256 bytes

static long pad16(long k) { return (k + 15) & ~15L; }                                  // fp8 row stride
static long pad4(long n) { return (n + 3) & ~3L; }                                    // fp32 row stride
static long region(long floats) { return (floats + ALIGN_FLOATS - 1) / ALIGN_FLOATS * ALIGN_FLOATS; }
static long byte_region(long bytes) { return region((bytes + 3) / 4); }

// The scratch from its first 256-byte boundary (the callers' buffers come from cudaMalloc and
// are carved at 64-byte steps; sizes below include the slack).
static float *aligned(float *scratch) { return (float *)(((uintptr_t)scratch + 255) & ~(uintptr_t)255); }

// MXFP8's scratch: the two operands decoded to fp32, (rows_a, K) and (rows_b, K).
static long mx_floats(long rows_a, long rows_b, long K) { return ALIGN_FLOATS + region(rows_a * K) + region(rows_b * K); }

// ---- the general product (table member gemm_f8): any transposes and leading dimensions
// [acc: M x pad4(N) floats][A codes: M x pad16(K)][B codes: N x pad16(K)]; gemm_mxfp8 takes the
// same size (gemm_f8.h's contract), so it is the larger of that and MXFP8's decoded operands.
long ct_cuda_gemm_f8_scratch_floats(long M, long N, long K, int with_beta) {
    long f8 = ALIGN_FLOATS + region(M * pad4(N)) + byte_region(M * pad16(K)) + byte_region(N * pad16(K));
    return ct_max_l(f8, mx_floats(M, N, K));
}

void ct_cuda_gemm_f8(int trans_a, int trans_b, long M, long N, long K, const uint8_t *A, long lda, ct_dtype fmt_a,
                     const float *scale_a, const uint8_t *B, long ldb, ct_dtype fmt_b, const float *scale_b,
                     int rowwise, float beta, float *C, long ldc, float *scratch) {
    if (M <= 0 || N <= 0) return;
    if (K < 0) K = 0;
    float *acc = aligned(scratch);
    uint8_t *qa = (uint8_t *)(acc + region(M * pad4(N))), *qb = qa + 4 * byte_region(M * pad16(K));
    ct_cuda_f8_repack(qa, pad16(K), A, lda, M, K, trans_a);   // op(A) (M, K)
    ct_cuda_f8_repack(qb, pad16(K), B, ldb, N, K, !trans_b);  // op(B)^T (N, K)
    ct_cuda_gemm_f8_tn(M, N, pad16(K), qa, fmt_a, qb, fmt_b, acc, pad4(N));
    ct_cuda_f8_epilogue(C, ldc, acc, pad4(N), M, N, scale_a, scale_b, rowwise, beta);
}

// ---- MXFP8 (table member gemm_mxfp8): [A decoded: M x K floats][B decoded: N x K floats]
void ct_cuda_gemm_mxfp8(long M, long N, long K, const uint8_t *A, const uint8_t *scale_a, ct_dtype fmt_a,
                        const uint8_t *B, const uint8_t *scale_b, ct_dtype fmt_b, float beta, float *C,
                        float *scratch) {
    if (M <= 0 || N <= 0) return;
    if (K < 0) K = 0;
    float *da = aligned(scratch), *db = da + region(M * K);
    ct_cuda_mx_decode(da, A, scale_a, M, K, fmt_a == CT_F8_E4M3);
    ct_cuda_mx_decode(db, B, scale_b, N, K, fmt_b == CT_F8_E4M3);
    ct_cuda_gemm(0, 1, M, N, K, 1.0f, da, K, db, K, beta, C, N);
}

// ---- quantising one operand
// amax (n, device) = its max over the tp ranks when `dim` is a dimension split splits.
static void agree(const ct_f8_split *sp, bool dim, float *amax, long n) {
    if (sp && sp->amax_max && dim && n > 0) sp->amax_max(sp->ctx, amax, n);
}

// The layout of one product's operands: A (M, K) and B (N, K) as codes with row stride pad16(K),
// their scales (sa: M or 1, sb: N or 1) and the fp32 result (M, pad4(N)) before the scales.
typedef struct {
    float *sa, *sb, *acc;
    uint8_t *qa, *qb;
} f8_operands;

static long operands_floats(long M, long N, long K) {
    return region(M) + region(N) + region(M * pad4(N)) + byte_region(M * pad16(K)) + byte_region(N * pad16(K));
}
static f8_operands operands(float *scratch, long M, long N, long K) {
    f8_operands o;
    o.sa = aligned(scratch);
    o.sb = o.sa + region(M);
    o.acc = o.sb + region(N);
    o.qa = (uint8_t *)(o.acc + region(M * pad4(N)));
    o.qb = o.qa + 4 * byte_region(M * pad16(K));
    return o;
}

// Scales and codes of x (rows, cols) as one operand of a product, laid out (out_rows, pad16(K))
// with out = transpose ? x^T : x. mode: CT_CUDA_F8_SCALE_ONE (tensorwise, not rounded),
// _ROW (per row of x, powers of two), _COL (per column of x, powers of two); `dim`: whether the
// amax spans a dimension the split splits.
static void quantize(uint8_t *q, float *s, const void *x, bool bf16, long rows, long cols, bool transpose, int mode,
                     ct_dtype fmt, const ct_f8_split *sp, bool dim) {
    long ns = mode == CT_CUDA_F8_SCALE_ONE ? 1 : (mode == CT_CUDA_F8_SCALE_ROW ? rows : cols);
    if (mode == CT_CUDA_F8_SCALE_ONE) ct_cuda_f8_amax(s, x, bf16, rows * cols);
    else if (mode == CT_CUDA_F8_SCALE_ROW) ct_cuda_f8_amax_rows(s, x, bf16, rows, cols);
    else ct_cuda_f8_amax_cols(s, x, bf16, rows, cols);
    agree(sp, dim, s, ns);
    ct_cuda_f8_scales(s, ns, fmt == CT_F8_E4M3, mode != CT_CUDA_F8_SCALE_ONE);
    ct_cuda_f8_cast(q, pad16(transpose ? rows : cols), x, bf16, rows, cols, transpose, s, mode, fmt == CT_F8_E4M3);
}

// The product of two quantised operands into C (M, N), ld ldc: unit-scale fp8 product, then the
// scales (and beta C) as the cpu's epilogue.
static void product(const f8_operands *o, long M, long N, long K, ct_dtype fa, ct_dtype fb, bool rowwise, float beta,
                    float *C, long ldc) {
    ct_cuda_gemm_f8_tn(M, N, pad16(K), o->qa, fa, o->qb, fb, o->acc, pad4(N));
    ct_cuda_f8_epilogue(C, ldc, o->acc, pad4(N), M, N, o->sa, o->sb, rowwise, beta);
}

static void check_input(ct_dtype dt) {
    if (dt != CT_F32 && dt != CT_BF16)
        ct_fatal("linear_f8", "input of dtype %s: the 8-bit linears take f32 or bf16", ct_dtype_name(dt));
}

// ---- forward: out (N, OC) = inp (N, IC) @ weight (OC, IC)^T
long ct_cuda_f8_scratch_floats(long N, long IC, long OC) {
    return ct_max_l(ALIGN_FLOATS + operands_floats(N, OC, IC), mx_floats(N, OC, IC));
}

void ct_cuda_linear_forward_f8(float *out, const void *inp, ct_dtype inp_dtype, const float *weight, long N,
                               long IC, long OC, ct_f8_recipe recipe, const ct_f8_split *split, float *scratch) {
    check_input(inp_dtype);
    if (N <= 0 || OC <= 0) return;
    bool ic = split && split->ic_split, oc = split && split->oc_split, bf = inp_dtype == CT_BF16;
    if (recipe == CT_F8_RECIPE_MXFP8) {  // both (rows, IC): blocked along the reduction already
        float *dx = aligned(scratch), *dw = dx + region(N * IC);
        ct_cuda_mx_dequant(dx, inp, bf, N, IC, false, true);
        ct_cuda_mx_dequant(dw, weight, false, OC, IC, false, true);
        ct_cuda_gemm(0, 1, N, OC, IC, 1.0f, dx, IC, dw, IC, 0.0f, out, OC);
        return;
    }
    bool rw = recipe == CT_F8_RECIPE_ROWWISE;
    int mode = rw ? CT_CUDA_F8_SCALE_ROW : CT_CUDA_F8_SCALE_ONE;  // weight's rows are weight^T's columns
    f8_operands o = operands(scratch, N, OC, IC);
    quantize(o.qa, o.sa, inp, bf, N, IC, false, mode, CT_F8_E4M3, split, ic);
    quantize(o.qb, o.sb, weight, false, OC, IC, false, mode, CT_F8_E4M3, split, rw ? ic : (ic || oc));
    product(&o, N, OC, IC, CT_F8_E4M3, CT_F8_E4M3, rw, 0.0f, out, OC);
}

// ---- backward, one product at a time in the same scratch:
//   dinp (N, IC)     = dout (N, OC) @ weight:    A = dout (N, OC), B = weight^T (IC, OC), K = OC
//   dweight (OC, IC) += dout^T @ inp (N, IC):     A = dout^T (OC, N), B = inp^T (IC, N), K = N
long ct_cuda_f8_backward_scratch_floats(long N, long IC, long OC) {
    long f8 = ct_max_l(operands_floats(N, IC, OC), operands_floats(OC, IC, N));
    return ct_max_l(ALIGN_FLOATS + f8, ct_max_l(mx_floats(N, IC, OC), mx_floats(OC, IC, N)));
}

static void backward_mx(float *dinp, float *dweight, const float *dout, const void *inp, bool bf, const float *weight,
                        long N, long IC, long OC, float *scratch) {
    if (dinp) {
        float *da = aligned(scratch), *db = da + region(N * OC);
        ct_cuda_mx_dequant(da, dout, false, N, OC, false, false);   // e5m2 blocks along OC
        ct_cuda_mx_dequant(db, weight, false, OC, IC, true, true);  // weight^T (IC, OC)
        ct_cuda_gemm(0, 1, N, IC, OC, 1.0f, da, OC, db, OC, 0.0f, dinp, IC);
    }
    if (dweight) {
        float *da = aligned(scratch), *db = da + region(OC * N);
        ct_cuda_mx_dequant(da, dout, false, N, OC, true, false);  // dout^T (OC, N), blocks along N
        ct_cuda_mx_dequant(db, inp, bf, N, IC, true, true);       // inp^T (IC, N)
        ct_cuda_gemm(0, 1, OC, IC, N, 1.0f, da, N, db, N, 1.0f, dweight, IC);
    }
}

void ct_cuda_linear_backward_f8(float *dinp, float *dweight, const float *dout, const void *inp,
                                ct_dtype inp_dtype, const float *weight, long N, long IC, long OC,
                                ct_f8_recipe recipe, const ct_f8_split *split, float *scratch) {
    check_input(inp_dtype);
    if (N <= 0 || IC <= 0 || (!dinp && !dweight)) return;
    bool ic = split && split->ic_split, oc = split && split->oc_split, bf = inp_dtype == CT_BF16;
    if (recipe == CT_F8_RECIPE_MXFP8) {
        backward_mx(dinp, dweight, dout, inp, bf, weight, N, IC, OC, scratch);
        return;
    }
    if (recipe == CT_F8_RECIPE_TENSORWISE) {
        // dout's one scale serves both products (the cpu casts dout once): both layouts start
        // with their sa at the scratch's start (di.sa == dw.sa), where it stays; the codes are
        // cast once per layout.
        f8_operands di = operands(scratch, N, IC, OC), dw = operands(scratch, OC, IC, N);
        ct_cuda_f8_amax(di.sa, dout, false, N * OC);
        agree(split, oc, di.sa, 1);
        ct_cuda_f8_scales(di.sa, 1, false, false);
        if (dinp) {
            ct_cuda_f8_cast(di.qa, pad16(OC), dout, false, N, OC, false, di.sa, CT_CUDA_F8_SCALE_ONE, false);
            quantize(di.qb, di.sb, weight, false, OC, IC, true, CT_CUDA_F8_SCALE_ONE, CT_F8_E4M3, split, ic || oc);
            product(&di, N, IC, OC, GRAD_FMT, CT_F8_E4M3, false, 0.0f, dinp, IC);
        }
        if (dweight) {
            ct_cuda_f8_cast(dw.qa, pad16(N), dout, false, N, OC, true, dw.sa, CT_CUDA_F8_SCALE_ONE, false);
            quantize(dw.qb, dw.sb, inp, bf, N, IC, true, CT_CUDA_F8_SCALE_ONE, CT_F8_E4M3, split, ic);
            product(&dw, OC, IC, N, GRAD_FMT, CT_F8_E4M3, false, 1.0f, dweight, IC);
        }
        return;
    }
    // rowwise: scale_a per row of A, scale_b per row of B (a column of op(B)), both over K
    if (dinp) {  // dout per row (over OC), weight per column (over OC)
        f8_operands o = operands(scratch, N, IC, OC);
        quantize(o.qa, o.sa, dout, false, N, OC, false, CT_CUDA_F8_SCALE_ROW, GRAD_FMT, split, oc);
        quantize(o.qb, o.sb, weight, false, OC, IC, true, CT_CUDA_F8_SCALE_COL, CT_F8_E4M3, split, oc);
        product(&o, N, IC, OC, GRAD_FMT, CT_F8_E4M3, true, 0.0f, dinp, IC);
    }
    if (dweight) {  // dout per column (over N), inp per column (over N): N is never split
        f8_operands o = operands(scratch, OC, IC, N);
        quantize(o.qa, o.sa, dout, false, N, OC, true, CT_CUDA_F8_SCALE_COL, GRAD_FMT, split, false);
        quantize(o.qb, o.sb, inp, bf, N, IC, true, CT_CUDA_F8_SCALE_COL, CT_F8_E4M3, split, false);
        product(&o, OC, IC, N, GRAD_FMT, CT_F8_E4M3, true, 1.0f, dweight, IC);
    }
}
