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
