#include "model/linear.h"

#include "core/error.h"
#include "core/mathutil.h"
#include "model/weight_packs.h"

static bool bf16(const ct_linear_ctx *c) { return c->prec.compute == CT_BF16; }
static long halves(long n) { return (n + 1) / 2; }  // floats that hold n bf16 values
static long align16(long n) { return (n + 15) & ~15L; }

// Each scratch buffer's size in floats: the largest any of the layers needs of it.
typedef struct {
    long w16, g16, f8;
} scratch_sizes;

static scratch_sizes sizes(const ct_kernels *k, const ct_precision *p, long N, const ct_linear_shape *l, int n) {
    scratch_sizes s = {0};
    for (int i = 0; i < n; i++) {
        long IC = l[i].in, OC = l[i].out;
        if (p->compute == CT_BF16 && !p->weights_bf16) s.w16 = ct_max_l(s.w16, align16(halves(OC * IC)));  // narrowed weight
        // the bf16 output gradient (ct_round_to_bf16 also rounds up to N x out through it)
        if (p->compute == CT_BF16 || p->quantized) s.g16 = ct_max_l(s.g16, align16(halves(N * OC)));
        if (p->quantized)  // the 8-bit kernels, either direction
            s.f8 = ct_max_l(s.f8, align16(ct_max_l(k->f8_scratch_floats(N, IC, OC),
                                                   k->f8_backward_scratch_floats(N, IC, OC))));
    }
    return s;
}

long ct_linear_scratch_floats(const ct_kernels *k, const ct_precision *p, long N, const ct_linear_shape *layers,
                              int n_layers) {
    scratch_sizes s = sizes(k, p, N, layers, n_layers);
    return s.w16 + s.g16 + s.f8;
}

void ct_linear_ctx_init(ct_linear_ctx *c, const ct_kernels *k, const ct_precision *p, float *scratch, long N,
                        const ct_linear_shape *layers, int n_layers) {
    scratch_sizes s = sizes(k, p, N, layers, n_layers);
    *c = (ct_linear_ctx){.k = k, .prec = *p};
    float *at = scratch;
    if (p->compute == CT_BF16 && !p->weights_bf16) {
        c->w16 = (uint16_t *)at;
        at += s.w16;
    }
    if (p->compute == CT_BF16 || p->quantized) {
        c->g16 = (uint16_t *)at;
        at += s.g16;
    }
    if (p->quantized) c->f8 = at;
}

// The fp32 weight (fp32 and 8-bit layers).
static const float *weight_f32(ct_weight W) {
    if (!W.f32) ct_fatal("linear", "an fp32 or 8-bit layer was given its weight in bf16 only");
    return W.f32;
}
// The bf16 weight: as given, or narrowed now from fp32 into w16.
static const uint16_t *weight_bf16(const ct_linear_ctx *c, ct_weight W, long n) {
    if (W.bf16) return W.bf16;
    if (!c->w16) ct_fatal("linear", "a bf16 layer was given an fp32 weight, and its stage gathers bf16 weights");
    c->k->f32_to_bf16(c->w16, weight_f32(W), n);
    return c->w16;
}

// W's packed form for `use` kept by the stage (model/weight_packs.h), or NULL: the product packs it.
static const void *packed(const ct_linear_ctx *c, ct_weight W, ct_pack_use use, long OC, long IC) {
    if (!c->packs || !W.pack_id || !W.bf16) return NULL;
    int id = W.pack_id - 1;
    return ct_weight_packs_get(c->packs, id / CT_BLOCK_LINEARS, id % CT_BLOCK_LINEARS, use, W.bf16, OC, IC);
}

static void check_input(const ct_linear_ctx *c, ct_tensor inp) {
    if (inp.dtype != c->prec.compute || inp.ld != inp.cols)
        ct_fatal("linear", "input of dtype %s (ld %ld, %ld cols), stage computes in %s", ct_dtype_name(inp.dtype),
                 inp.ld, inp.cols, ct_dtype_name(c->prec.compute));
}

void ct_linear_fwd(const ct_linear_ctx *c, bool f8, const ct_f8_split *split, float *out, ct_tensor inp,
                   ct_weight W, long OC) {
    const ct_kernels *k = c->k;
    long N = inp.rows, IC = inp.cols;
    check_input(c, inp);
    if (f8) {
        k->linear_forward_f8(out, inp.data, inp.dtype, weight_f32(W), N, IC, OC, c->prec.recipe, split, c->f8);
    } else if (bf16(c)) {
        const void *wp = packed(c, W, CT_PACK_FORWARD, OC, IC);
        if (wp) k->gemm_bf16_packed(0, N, OC, IC, 1.0f, inp.data, IC, wp, 0.0f, out, OC);
        else k->gemm_bf16(0, 1, N, OC, IC, 1.0f, inp.data, IC, weight_bf16(c, W, OC * IC), IC, 0.0f, out, OC);
    } else {
        k->linear_forward(out, inp.data, weight_f32(W), N, IC, OC);
    }
}

void ct_linear_bwd(const ct_linear_ctx *c, bool f8, const ct_f8_split *split, float *dinp, float *dW,
                   const float *dout, ct_tensor inp, ct_weight W, long OC) {
    const ct_kernels *k = c->k;
    long N = inp.rows, IC = inp.cols;
    check_input(c, inp);
    if (f8) {
        k->linear_backward_f8(dinp, dW, dout, dW ? inp.data : NULL, inp.dtype, dinp ? weight_f32(W) : NULL, N, IC,
                              OC, c->prec.recipe, split, c->f8);
    } else if (bf16(c)) {
        k->f32_to_bf16(c->g16, dout, N * OC);  // (N, OC)
        const void *wp = dinp ? packed(c, W, CT_PACK_INPUT_GRAD, OC, IC) : NULL;
        if (wp) k->gemm_bf16_packed(0, N, IC, OC, 1.0f, c->g16, OC, wp, 0.0f, dinp, IC);
        else if (dinp) k->gemm_bf16(0, 0, N, IC, OC, 1.0f, c->g16, OC, weight_bf16(c, W, OC * IC), IC, 0.0f, dinp, IC);
        if (dW) k->gemm_bf16(1, 0, OC, IC, N, 1.0f, c->g16, OC, inp.data, IC, 1.0f, dW, IC);
    } else {
        k->linear_backward(dinp, dW, dout, inp.data, dinp ? weight_f32(W) : NULL, N, IC, OC);
    }
}

void ct_keep_activation(const ct_linear_ctx *c, void *kept, float *work, long n) {
    if (!bf16(c)) return;
    c->k->f32_to_bf16(kept, work, n);
    c->k->bf16_to_f32(work, kept, n);
}

const float *ct_kept_as_f32(const ct_linear_ctx *c, const void *kept, float *work, long n) {
    if (!bf16(c)) return kept;
    c->k->bf16_to_f32(work, kept, n);
    return work;
}

void ct_round_to_bf16(const ct_linear_ctx *c, float *x, long n) {
    c->k->f32_to_bf16(c->g16, x, n);
    c->k->bf16_to_f32(x, c->g16, n);
}
