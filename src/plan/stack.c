// The software stack's own efficiencies (time_model.h, ct_plan_stack): what a term runs at on
// TorchTitan's stack where it differs from the hardware profile's figure, each from a public
// measurement named beside it. Nothing here is fitted to the published runs' tokens/s.
#include <math.h>

#include "plan/time_internal.h"

// FlashAttention-2 on an H100 80GB SXM5, bf16, head dimension 128, TFLOP/s by sequence length
// 512, 1k, 2k, 4k, 8k, 16k: Shah et al., "FlashAttention-3" (arXiv:2407.08608), the benchmark
// figures of section 4.1 -- forward with causal mask 191, 260, 298, 319, 333, 335; backward
// 214, 260, 291, 310, 318, 322 (the figure's backward runs without the mask; the causal one
// skips the masked tiles and is counted over the causal half, as here). PyTorch's SDPA, which
// TorchTitan called, ran FlashAttention-2's kernels on H100. Kept as fractions of the SXM5's
// dense bf16 peak (989 TFLOP/s), so a profile with another peak scales them.
static const double fa2_fwd_causal[] = {191, 260, 298, 319, 333, 335};
static const double fa2_bwd[] = {214, 260, 291, 310, 318, 322};
static const double H100_SXM_BF16 = 989e12;

// Linear in log2(sequence) between the measured lengths, flat beyond them.
static double by_length(const double *v, double seq) {
    double x = log2(seq / 512.0);
    if (x <= 0) return v[0];
    if (x >= 5) return v[5];
    int i = (int)x;
    return v[i] + (x - i) * (v[i + 1] - v[i]);
}

bool ct_tm_stack_attention(const ct_tm *t, double seq, double *fwd_frac, double *bwd_frac) {
    // The table is Hopper's (FlashAttention-2 on A100 reaches 50-73% of its peak, FA2 paper):
    // other GPUs keep their profile's attention_efficiency. A device with fp8 tensor cores and
    // TorchTitan's stack is taken as Hopper or later; head dimension 128 is Llama 3's.
    if (t->stack != CT_STACK_TORCHTITAN || t->hw->cpu || !(t->hw->peak_fp8 > 0)) return false;
    *fwd_frac = by_length(fa2_fwd_causal, seq) * 1e12 / H100_SXM_BF16;
    *bwd_frac = by_length(fa2_bwd, seq) * 1e12 / H100_SXM_BF16;
    return true;
}

// The elementwise kernels of one block and micro-batch as TorchTitan's Llama 3 runs them (its
// model code: RMSNorm as x.float() -> pow(2) -> mean -> * rsqrt -> type_as -> * weight; RoPE
// through complex fp32; repeat_kv copying K and V out to every query head; the attention output
// transposed into a contiguous copy; residual adds; F.silu(w1 x) * w3 x), counted in bytes read
// and written per kernel from those shapes; e is the compute dtype's width (the residual stream
// and activations are in it under FSDP2's mixed precision), u = 4 the fp32 upcasts. Compiled
// (torch.compile per block), each chain becomes one kernel that reads its inputs and writes its
// outputs once: the norm with the residual add before it, RoPE, SwiGLU; the copies remain.
// Backward: twice the forward's bytes (each kernel reads its saved input and the output's
// gradient and writes the input's), as for ctitan's kernels.
bool ct_tm_stack_elementwise(const ct_tm *t, double N, double Nsp, double F, ct_tm_ew_bytes *out) {
    if (t->stack != CT_STACK_TORCHTITAN || t->hw->cpu) return false;
    const ct_model_config *l = &t->lm;
    const double C = l->dim, HS = l->head_dim, NH = l->n_heads, NKV = l->n_kv_heads;
    const double e = t->bf16 ? 2 : 4, u = 4;
    double norm, rope, swiglu, resid;
    if (t->compile) {
        norm = Nsp * C * 4 * e;  // x and the block output read, their sum and its norm written
        resid = 0;               // (in the norm's kernel; the last add in the next block's)
        rope = N * (NH + NKV) * HS * 2 * e;
        swiglu = N * F * 3 * e;
    } else {
        norm = Nsp * C * (4 * e + 6 * u);
        resid = Nsp * C * 3 * e;
        rope = N * (NH + NKV) * HS * (2 * e + 4 * u);
        swiglu = N * F * 5 * e;
    }
    double repeat_kv = NH > NKV ? 2.0 * N * (NKV + NH) * HS * e : 0;
    double transpose = 2.0 * N * NH * HS * e;
    out->fwd = 2 * norm + 2 * resid + rope + swiglu + repeat_kv + transpose;
    out->bwd = 2 * out->fwd;
    out->recompute = 2 * norm + swiglu;  // what both selective policies rerun of these
    return true;
}
