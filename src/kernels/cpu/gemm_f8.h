// 8-bit floating-point matmuls on the CPU (kernels/cpu/gemm_f8.c): float8 with tensorwise or
// rowwise scales (torchao's float8 training recipes, torch._scaled_mm) and MXFP8 (OCP MX v1.0,
// 32-element blocks along K with e8m0 scales). Internal to src/kernels like gemm_bf16.h; code
// above kernels/ calls the table members gemm_f8, gemm_mxfp8 and gemm_f8_scratch_floats in
// kernels/backend.h. The linear layers that quantise and then call these: kernels/cpu/linear_f8.h.
//
// What is computed is what a GPU fp8 matmul computes: the products of the 8-bit values, summed
// in fp32, the scales applied after. The emulation decodes the codes into bf16 (or fp32) tiles and
// runs ct_gemm_bf16 (or ct_gemm) on them. Why that is exact with respect to the GPU's semantics:
//   - decoding is exact: every e4m3 / e5m2 value has at most 4 / 3 significant bits and an
//     exponent in [-9, 8] / [-16, 15], so it is a bf16 (8 significant bits, fp32's exponent range)
//     and an fp32 value;
//   - each product of two such values has at most 8 significant bits and magnitude within
//     [2^-32, 448 * 57344], so it is exact in fp32 -- on the GPU's tensor cores as here;
//   - the products are summed in fp32 on both; only the order (blocking, split-K) differs, which
//     changes the result within fp32 accumulation error (K * 2^-24 * sum|products|), the same
//     freedom two GPUs or two cuBLAS versions have.
// So this equals the GPU's result up to summation order, and both equal a float64 computation on
// the dequantised inputs within that bound (tests/test_kernels_gemm_f8.c checks it).
//
// Scales are the quantisation multipliers of core/float_formats.h (q = sat(x * s), so
// x ~ q / s). Like torchao, which hands torch._scaled_mm the fp32 reciprocals 1/s, the result is
// acc * ((1/s_a) * (1/s_b)) in fp32: bit-exact to acc / (s_a s_b) for the power-of-two scales of
// the rowwise recipe, within 3 fp32 roundings otherwise.
#ifndef CT_CPU_GEMM_F8_H
#define CT_CPU_GEMM_F8_H
#include <stdint.h>

#include "core/dtype.h"

// Scratch (floats) for ct_gemm_f8 / ct_gemm_mxfp8 of an (M, N, K) product: the decoded tiles,
// M*K + K*N, plus M*N for an fp32 accumulator when ct_gemm_f8 is called with beta != 0
// (with_beta != 0). The scales are never folded into the gemm's alpha: oneDNN's sgemm may apply
// alpha while packing A, which would round a*alpha before the product and break exactness.
long ct_gemm_f8_scratch_floats(long M, long N, long K, int with_beta);

// C (M, N) = (op(A) @ op(B)) / (s_a s_b) + beta * C, row-major, op(X) = X^T when trans_x (the
// shapes and leading dimensions of ct_gemm). A and B are fp8 codes, fmt_a / fmt_b CT_F8_E4M3 or
// CT_F8_E5M2 each (forward: e4m3 x e4m3; backward: e5m2 gradients x e4m3). rowwise == 0:
// scale_a and scale_b point to one float each (tensorwise); rowwise != 0: scale_a[M] (one per row
// of op(A)), scale_b[N] (one per column of op(B)) -- the layout that factors out of the sum over
// K, so the scales can be applied after accumulation. beta == 0 overwrites C (NaN garbage too).
// scratch: ct_gemm_f8_scratch_floats(M, N, K, beta != 0) floats; nothing allocated
// here (ct_gemm_bf16 may, on its first call with a shape, for its own primitive).
void ct_gemm_f8(int trans_a, int trans_b, long M, long N, long K, const uint8_t *A, long lda, ct_dtype fmt_a,
                const float *scale_a, const uint8_t *B, long ldb, ct_dtype fmt_b, const float *scale_b, int rowwise,
                float beta, float *C, long ldc, float *scratch);

// MXFP8: C (M, N) = A @ B^T + beta * C with A (M, K) and B (N, K) both blocked along K as
// ct_mx_quantize_rows writes them: codes row-major (ld = K), e8m0 scales (rows, ct_mx_nblocks(K)),
// a shorter tail block when K % 32 != 0. C = sum_blocks 2^(Xa[m,b] + Xb[n,b]) * sum_{k in b} a_q b_q.
// An operand held as (K, N) (a weight gradient's inp, say) is blocked along K by quantising its
// transpose: transpose the fp32 (K, N) into (N, K), then ct_mx_quantize_rows.
// Emulation: each block is dequantised (element * 2^X) and the dequantised matrices multiplied in
// fp32 / bf16. Multiplying by a power of two is exact and commutes with fp32 rounding, so this is
// the GPU's per-block sums rescaled, up to summation order -- unless values leave fp32's normal
// range: dequantised elements are exact in fp32 for every e8m0 scale a quantiser produces (the
// smallest, 2^-9 * 2^-127, is an fp32 subnormal), but products below 2^-126 (blocks scaled by
// about 2^-60 or less on both sides) are rounded as subnormals, or flushed by AMX; the GPU's
// result there is an fp32 subnormal or zero as well. Blocks whose dequantised elements would be
// bf16 subnormals send the call down the fp32 path (exact). fmt_a / fmt_b: the element formats
// (MXFP8 is e4m3; e5m2 for gradients). scratch: ct_gemm_f8_scratch_floats(M, N, K, 0) floats.
void ct_gemm_mxfp8(long M, long N, long K, const uint8_t *A, const uint8_t *scale_a, ct_dtype fmt_a, const uint8_t *B,
                   const uint8_t *scale_b, ct_dtype fmt_b, float beta, float *C, float *scratch);

// Test knob (call while no f8 gemm runs): 0 = decode to bf16 + ct_gemm_bf16 where this CPU has a
// bf16 kernel, else fp32 + ct_gemm (the default); 1 = always fp32; 2 = always bf16 (on a CPU
// without bf16 kernels ct_gemm_bf16 widens again: slow, but it tests the bf16 decode).
void ct_gemm_f8_test_path(int path);
#endif
