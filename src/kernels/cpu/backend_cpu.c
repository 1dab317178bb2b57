// The cpu backend's table: every member is the kernels.h function of the same name (the CPU
// reference, tested against float64), so a call through the table is the direct call. Host
// memory is the device: the copies to and from the host are plain copies. Compiled once per
// kernel set (kernel_set.h), with the set's descriptor below. The kernels whose result is a
// scalar (a loss sum, a sum of squares) add it to a double in the table's memory: the three
// adapters below, since kernels.h returns it.
#include "kernels/cpu/backend_cpu.h"
#include "kernels/cpu/kernel_set.h"

#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/gemm_f8.h"
#include "kernels/cpu/linear_f8.h"
#include "kernels/kernels.h"

static void xent_fused_into(double *loss_sum, float *dx, float *dW, const float *x, const void *W,
                            const int32_t *targets, long N, long C, long V, float grad_scale, long chunk_rows, bool bf16,
                            float *scratch) {
    *loss_sum += ct_xent_fused(dx, dW, x, W, targets, N, C, V, grad_scale, chunk_rows, bf16, scratch);
}

static void xent_rows_loss_into(double *loss_sum, const float *mx, const float *sum, const float *zt,
                                const int32_t *targets, long R) {
    *loss_sum += ct_xent_rows_loss(mx, sum, zt, targets, R);
}

static void sum_squares_into(double *sum, const float *x, long n) { *sum += ct_sum_squares(x, n); }

// No fp8 units on a cpu: the codes are decoded exactly and multiplied in fp32 / bf16.
static const char *f8_gemm_path(void) { return "emulated on cpu (codes decoded, fp32 / bf16 products)"; }

static void synchronize_nothing(void) {}  // every cpu kernel has finished when it returns

static const ct_kernels ct_kernels_cpu = {
    .name = "cpu",
    .device = CT_DEVICE_CPU,

    .zero = ct_cpu_zero,
    .copy = ct_cpu_copy,
    .copy_to_host = ct_cpu_copy,
    .copy_from_host = ct_cpu_copy,
    .copy_2d = ct_cpu_copy_2d,
    .synchronize = synchronize_nothing,

    .gemm = ct_gemm,
    .linear_forward = ct_linear_forward,
    .linear_backward = ct_linear_backward,
    .matmul_peak_gflops = ct_cpu_matmul_peak_gflops,

    .embedding_forward = ct_embedding_forward,
    .embedding_forward_bf16 = ct_embedding_forward_bf16,
    .embedding_backward = ct_embedding_backward,
    .rmsnorm_forward = ct_rmsnorm_forward,
    .rmsnorm_backward = ct_rmsnorm_backward,
    .rmsnorm_forward_bf16 = ct_rmsnorm_forward_bf16,
    .rope_tables = ct_rope_tables,
    .rope_forward = ct_rope_forward,
    .rope_backward = ct_rope_backward,
    .qkv_rope_to_bf16 = ct_qkv_rope_to_bf16,
    .attention_scratch_floats = ct_attention_scratch_floats,
    .attention_forward = ct_attention_forward,
    .attention_backward = ct_attention_backward,
    .attention_forward_bf16 = ct_attention_forward_bf16,
    .attention_backward_bf16 = ct_attention_backward_bf16,
    .attention_merge = ct_attention_merge,
    .swiglu_forward = ct_swiglu_forward,
    .swiglu_backward = ct_swiglu_backward,
    .swiglu_forward_bf16 = ct_swiglu_forward_bf16,
    .swiglu_backward_bf16 = ct_swiglu_backward_bf16,
    .moe_router_forward = ct_moe_router_forward,
    .moe_router_backward = ct_moe_router_backward,
    .moe_aux_loss = ct_moe_aux_loss,
    .moe_bias_update = ct_moe_bias_update,
    .moe_dispatch_plan = ct_moe_dispatch_plan,
    .moe_permute = ct_moe_permute,
    .moe_permute_backward = ct_moe_permute_backward,
    .moe_combine = ct_moe_combine,
    .moe_combine_backward = ct_moe_combine_backward,
    .grouped_linear_forward = ct_grouped_linear_forward,
    .grouped_linear_backward = ct_grouped_linear_backward,
    .grouped_linear_forward_bf16 = ct_grouped_linear_forward_bf16,
    .grouped_linear_backward_bf16 = ct_grouped_linear_backward_bf16,

    .xent_scratch_floats = ct_xent_scratch_floats,
    .xent_fused = xent_fused_into,
    .xent_bad_target = ct_xent_bad_target,

    .xent_rows_max = ct_xent_rows_max,
    .xent_rows_exp_sum = ct_xent_rows_exp_sum,
    .xent_rows_dlogits = ct_xent_rows_dlogits,
    .xent_rows_loss = xent_rows_loss_into,
    .xent_rows_gathered = ct_xent_rows_gathered,

    .adamw_update = ct_adamw_update,
    .clip_factor = ct_clip_factor,
    .sum_squares = sum_squares_into,
    .add_inplace = ct_add_inplace,
    .scale_inplace = ct_scale_inplace,

    .gemm_bf16 = ct_gemm_bf16,
    .gemm_bf16_packed_bytes = ct_gemm_bf16_packed_bytes,
    .gemm_bf16_pack_b = ct_gemm_bf16_pack_b,
    .gemm_bf16_packed = ct_gemm_bf16_packed,
    .matmul_peak_gflops_bf16 = ct_cpu_matmul_peak_gflops_bf16,
    .bf16_gemm_path = ct_bf16_gemm_path,
    .f8_gemm_path = f8_gemm_path,
    .f32_to_bf16 = ct_f32_to_bf16_array,

    .gemm_f8_scratch_floats = ct_gemm_f8_scratch_floats,
    .gemm_f8 = ct_gemm_f8,
    .gemm_mxfp8 = ct_gemm_mxfp8,
    .f8_scratch_floats = ct_f8_scratch_floats,
    .linear_forward_f8 = ct_linear_forward_f8,

    .f8_backward_scratch_floats = ct_f8_backward_scratch_floats,
    .linear_backward_f8 = ct_linear_backward_f8,
    .bf16_to_f32 = ct_bf16_to_f32_array,

    .residual_rmsnorm_forward = ct_residual_rmsnorm_forward,
    .rmsnorm_linear_scratch_floats = ct_rmsnorm_linear_scratch_floats,
    .rmsnorm_linear_forward = ct_rmsnorm_linear_forward,
    .rmsnorm_linear_rope_forward = ct_rmsnorm_linear_rope_forward,
    .linear_swiglu_scratch_floats = ct_linear_swiglu_scratch_floats,
    .linear_swiglu_forward = ct_linear_swiglu_forward,
    .linear_rope_scratch_floats = ct_linear_rope_scratch_floats,
    .linear_rope_forward = ct_linear_rope_forward,

    .residual_rmsnorm_forward_bf16 = ct_residual_rmsnorm_forward_bf16,
    .linear_swiglu_forward_bf16 = ct_linear_swiglu_forward_bf16,
    .linear_rope_forward_bf16 = ct_linear_rope_forward_bf16,
    .linear_swiglu_backward_bf16 = ct_linear_swiglu_backward_bf16,
};

// What this set was compiled to use: the instruction-set macros the compiler defined for it.
#if defined(__AVX2__) && defined(__FMA__) && defined(__BMI2__) && defined(__F16C__)
#define NEEDS_V3 CT_CPU_X86_64_V3
#else
#define NEEDS_V3 0
#endif
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512CD__) && defined(__AVX512DQ__) && \
    defined(__AVX512VL__)
#define NEEDS_V4 CT_CPU_X86_64_V4
#else
#define NEEDS_V4 0
#endif
#if defined(__AVX512BF16__)
#define NEEDS_BF16 CT_CPU_AVX512_BF16
#else
#define NEEDS_BF16 0
#endif
#if defined(__AMX_TILE__) && defined(__AMX_BF16__)
#define NEEDS_AMX (CT_CPU_AMX_TILE | CT_CPU_AMX_BF16)
#else
#define NEEDS_AMX 0
#endif

const char *ct_cpu_kernel_set_compiled(void) { return CT_KERNEL_SET_NAME; }

const ct_cpu_kernel_set ct_cpu_kernel_set_this = {
    .name = CT_KERNEL_SET_NAME,  // -DCT_KERNEL_SET_NAME="avx2" (the Makefile)
    .needs = NEEDS_V3 | NEEDS_V4 | NEEDS_BF16 | NEEDS_AMX,
    .kernels = &ct_kernels_cpu,
};
