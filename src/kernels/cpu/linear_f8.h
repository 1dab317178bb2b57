// Quantise-then-multiply linear layers for float8 training on the CPU (kernels/cpu/linear_f8.c):
// the forward and backward of a Linear whose three matmuls run in 8 bits, as torchao's float8
// training (torchao.float8, torchao.prototype.mx_formats) runs them. Internal to src/kernels;
// code above kernels/ calls the table members f8_scratch_floats, linear_forward_f8,
// f8_backward_scratch_floats and linear_backward_f8 in kernels/backend.h.
//
// Each matmul quantises its operands afresh (fp8 codes + scales in the caller's scratch) and
// hands them to ct_gemm_f8 / ct_gemm_mxfp8 (kernels/cpu/gemm_f8.h), whose results are the GPU's
// up to fp32 summation order. Every cast saturates and rounds to nearest even
// (core/float_formats.h). Formats: inp and weight e4m3; the gradient dout e5m2 (more range,
// one bit less precision: torchao's default for grad_output, and what the tensorwise recipe
// uses). torchao's rowwise and mxfp8 recipes keep grad_output in e4m3; here every recipe casts
// it to e5m2 (one gradient format for every recipe), which changes only which fp8 value a
// gradient element rounds to, not where the scales go.
//
// The input inp comes as it is kept: inp_dtype CT_F32, or CT_BF16 (the activation a bf16 run
// keeps for backward). bf16 values are exact in fp32 and quantised as those fp32 values, so a
// bf16 input gives bit for bit what its fp32 widening gives, with no caller-side copy: the
// kernel widens it into the part of its scratch the matmul's decoded tiles use later (at least
// N * IC floats, free until the matmul), so the scratch sizes do not depend on inp_dtype.
// weight and dout are fp32.
#ifndef CT_CPU_LINEAR_F8_H
#define CT_CPU_LINEAR_F8_H
#include "kernels/backend.h"  // ct_f8_recipe

// out (N, OC) = inp (N, IC) @ weight (OC, IC)^T with both operands cast to e4m3 as `recipe` says:
//   CT_F8_RECIPE_TENSORWISE: one amax-derived scale per tensor (torchao "tensorwise");
//   CT_F8_RECIPE_ROWWISE: one per row of inp and one per row of weight (= per column of
//     weight^T), rounded down to powers of two (torchao "rowwise");
//   CT_F8_RECIPE_MXFP8: 32-element blocks along IC, e8m0 scales (torchao "mxfp8").
// scratch: ct_f8_scratch_floats(N, IC, OC) floats (enough for every recipe); no allocation.
long ct_f8_scratch_floats(long N, long IC, long OC);
// split (kernels/backend.h; NULL: the whole layer): under tensor parallel the amaxes that span a
// split dimension are MAX-agreed over the group before the casts -- tensorwise: inp's when IC is
// split, weight's when either is; rowwise: inp's and weight's rows when IC is split. MXFP8 blocks
// lie along IC and need nothing (the caller keeps a split IC's local extent a multiple of 32).
void ct_linear_forward_f8(float *out, const void *inp, ct_dtype inp_dtype, const float *weight, long N, long IC,
                          long OC, ct_f8_recipe recipe, const ct_f8_split *split, float *scratch);

// The backward of that layer, with ct_linear_backward's contract (kernels/kernels.h):
//   dinp (N, IC)     = dout (N, OC) @ weight (OC, IC)    overwritten; skipped when dinp == NULL
//   dweight (OC, IC) += dout^T @ inp (N, IC)            accumulated; skipped when dweight == NULL
// dout cast to e5m2, inp and weight to e4m3, each scaled for its role in its matmul so that the
// scales factor out of that matmul's sum (reduction over OC for dinp, over N for dweight):
//   TENSORWISE: one scale per tensor, amax-derived, not rounded (torchao "tensorwise"); dout's
//     cast serves both matmuls.
//   ROWWISE (torchao "rowwise", "axiswise" scales rounded down to powers of two):
//     dinp:    dout one scale per row (amax over OC), weight one per column (over OC);
//     dweight: dout one per column (amax over N), inp one per column (over N).
//   MXFP8: 32-element blocks along the reduction dimension, e8m0 scales, shorter tail blocks:
//     dinp:    dout rows blocked along OC; weight^T (IC, OC) rows blocked along OC;
//     dweight: dout^T (OC, N) and inp^T (IC, N) rows blocked along N (fp32 transposes are made
//     in scratch, then quantised, as gemm_f8.h describes).
// scratch: ct_f8_backward_scratch_floats(N, IC, OC) floats, for every recipe and either output
// skipped or not; nothing is allocated here (ct_gemm_bf16 may, on its first call with a shape).
// split, as for the forward: tensorwise agrees on dout's amax when OC is split, weight's when
// either is, inp's when IC is split; rowwise on dinp's dout rows and weight columns (both over
// OC) when OC is split; dweight's scales run over N, which tp never splits; MXFP8 as forward.
long ct_f8_backward_scratch_floats(long N, long IC, long OC);
// inp (inp_dtype, as for the forward) is read only when dweight != NULL.
void ct_linear_backward_f8(float *dinp, float *dweight, const float *dout, const void *inp, ct_dtype inp_dtype,
                           const float *weight, long N, long IC, long OC, ct_f8_recipe recipe,
                           const ct_f8_split *split, float *scratch);
#endif
