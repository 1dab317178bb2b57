#include "model/stage_ops.h"

#include <stddef.h>

const char *ct_phase_name(ct_phase p) {
    static const char *const names[CT_NPHASES] = {"forward", "recompute", "backward", "backward_input",
                                                  "backward_weight"};
    return (unsigned)p < CT_NPHASES ? names[p] : "?";
}

// Local attention and loss: the kernel backend's own, its table as the context.
static void attention_forward(void *ctx, const ct_attention_args *a) {
    const ct_kernels *k = ctx;
    k->attention_forward(a->out, a->lse, a->q, a->ldq, a->k, a->ldk, a->v, a->ldv, a->q_pos, a->k_pos, a->q_doc,
                         a->k_doc, a->B, a->Tq, a->Tk, a->NH, a->NKV, a->HS, a->scratch);
}

static void attention_backward(void *ctx, const ct_attention_args *a, const float *dout, float *dq, float *dk,
                               float *dv) {
    const ct_kernels *k = ctx;
    k->attention_backward(dq, dk, dv, dout, a->out, a->lse, a->q, a->ldq, a->k, a->ldk, a->v, a->ldv, a->q_pos,
                          a->k_pos, a->q_doc, a->k_doc, a->B, a->Tq, a->Tk, a->NH, a->NKV, a->HS, a->scratch);
}

static void attention_forward_bf16(void *ctx, const ct_attention_args *a) {
    const ct_kernels *k = ctx;
    k->attention_forward_bf16(a->out16, a->lse, a->q16, a->ldq, a->k16, a->ldk, a->v16, a->ldv, a->q_pos, a->k_pos,
                              a->q_doc, a->k_doc, a->B, a->Tq, a->Tk, a->NH, a->NKV, a->HS, a->scratch);
}

static void attention_backward_bf16(void *ctx, const ct_attention_args *a, const float *dout, float *dq, float *dk,
                                    float *dv) {
    const ct_kernels *k = ctx;
    k->attention_backward_bf16(dq, dk, dv, dout, a->out16, a->lse, a->q16, a->ldq, a->k16, a->ldk, a->v16, a->ldv,
                               a->q_pos, a->k_pos, a->q_doc, a->k_doc, a->B, a->Tq, a->Tk, a->NH, a->NKV, a->HS,
                               a->scratch);
}

static long attention_scratch(void *ctx, long Tq, long Tk, long HS) {
    const ct_kernels *k = ctx;
    return k->attention_scratch_floats(Tq, Tk, HS);
}

static void loss(void *ctx, double *loss_sum, float *dx, float *dW, const float *x, const void *W,
                 const int32_t *targets, long N, long C, long V_local, long vocab_start, float grad_scale,
                 long chunk_rows, bool bf16, float *scratch) {
    const ct_kernels *k = ctx;
    (void)vocab_start;  // the whole vocabulary is here
    k->xent_fused(loss_sum, dx, dW, x, W, targets, N, C, V_local, grad_scale, chunk_rows, bf16, scratch);
}

static long loss_scratch(void *ctx, long chunk_rows, long V_local, long C, bool bf16) {
    const ct_kernels *k = ctx;
    return k->xent_scratch_floats(chunk_rows, V_local, C, bf16);
}

ct_stage_ops ct_stage_ops_local(const ct_kernels *k) {
    ct_stage_ops ops = {
        .tp = {.size = 1, .rank = 0},
        .attention = {.ctx = (void *)k, .forward = attention_forward, .backward = attention_backward,
                      .forward_bf16 = k->attention_forward_bf16 ? attention_forward_bf16 : NULL,
                      .backward_bf16 = k->attention_backward_bf16 ? attention_backward_bf16 : NULL,
                      .scratch_floats = attention_scratch},
        .loss = {.ctx = (void *)k, .fn = loss, .scratch_floats = loss_scratch},
    };
    return ops;
}
