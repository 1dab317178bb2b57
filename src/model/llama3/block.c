// Llama 3's block: pre-norm attention + SwiGLU feed-forward, forward, the checkpointing kinds'
// recompute, and backward (combined, or input-only with the weight pass apart). The buffers each
// of those needs are carved in buffers.c.
#include <stdbool.h>

#include "core/trace.h"
#include "model/llama3/llama3.h"
#include "model/weight_packs.h"

static ct_llama3_work *W(const ct_block_ctx *c) { return c->work; }
static long qkv_dim(const ct_block_ctx *c) { return ct_llama3_qkv_dim(c->cfg); }

// ------------------------------------------------------------------ profiling

// A profile's span of one operation (core/trace.h, CT_TRACE_KERNEL) with its layer: opened here,
// on the calling thread, around the kernel call -- never inside the kernels, whose OpenMP
// workers record nothing. One branch when not profiling. The names are static strings:
// "<op>.forward" / ".backward"; a linear layer's backward that computes only the input or only
// the weight gradient (async tp, the split backward) is ".backward_input" / ".backward_weight".
// A recompute runs the forward's operations, so its spans are named ".forward" inside the
// block's "block.recompute" span.
static int op_span(const char *name, int layer) {
    return ct_trace_begin2(CT_TRACE_KERNEL, name, "layer", layer, NULL, 0);
}

static const char *linear_span_name(ct_block_linear l, bool forward, bool dinp, bool dW) {
    static const char *const names[CT_BLOCK_LINEARS][4] = {
        {"attention.wqkv.forward", "attention.wqkv.backward", "attention.wqkv.backward_input",
         "attention.wqkv.backward_weight"},
        {"attention.wo.forward", "attention.wo.backward", "attention.wo.backward_input",
         "attention.wo.backward_weight"},
        {"feed_forward.w13.forward", "feed_forward.w13.backward", "feed_forward.w13.backward_input",
         "feed_forward.w13.backward_weight"},
        {"feed_forward.w2.forward", "feed_forward.w2.backward", "feed_forward.w2.backward_input",
         "feed_forward.w2.backward_weight"},
    };
    int pass = forward ? 0 : dinp && dW ? 1 : dinp ? 2 : 3;
    return (unsigned)l < CT_BLOCK_LINEARS ? names[l][pass] : "linear";
}

// ------------------------------------------------------------------ tensor-parallel edges

static bool seq_parallel(const ct_block_ctx *c) { return c->ops->tp.sequence_parallel != 0; }

// f: local rows of the residual stream -> the full rows the column-parallel matmuls read.
// Without sequence parallel the two are one buffer and nothing moves.
static void gather_rows(const ct_block_ctx *c, const float *local, float *full) {
    if (c->ops->tp.gather_rows && seq_parallel(c))
        c->ops->tp.gather_rows(c->ops->tp.ctx, local, full, c->N_local, c->cfg->dim);
}

// g: partial sums of a row-parallel matmul -> reduced local rows (in place without sequence
// parallel).
static void reduce_rows(const ct_block_ctx *c, float *full, float *local) {
    if (c->ops->tp.reduce_rows) c->ops->tp.reduce_rows(c->ops->tp.ctx, full, local, c->N_local, c->cfg->dim);
}

// Where a norm's output goes before gather_rows: straight into the full buffer unless sequence
// parallel splits the rows.
static float *norm_out(const ct_block_ctx *c, float *full) { return seq_parallel(c) ? c->tmp_local : full; }
// Where a row-parallel matmul writes its partial sums: into the local buffer itself (reduced in
// place) unless sequence parallel reduce-scatters them.
static float *partial_out(const ct_block_ctx *c, float *local) { return seq_parallel(c) ? c->tmp_full : local; }

static bool bf16(const ct_block_ctx *c) { return c->lin->prec.compute == CT_BF16; }
// The kept activation's buffer for computing in fp32: itself in fp32, else the work buffer.
static float *work(const ct_block_ctx *c, void *kept, float *w) { return bf16(c) ? w : kept; }
// A kept matmul input as the typed (rows, cols) view the linear layer reads.
static ct_tensor act(const ct_block_ctx *c, const void *kept, long cols) {
    return ct_tensor_make((void *)kept, c->lin->prec.compute, (ct_device){c->k->device, 0}, c->N, cols);
}
static bool f8(const ct_block_ctx *c, int layer, ct_block_linear l) { return ct_precision_f8(&c->lin->prec, layer, l); }

// Bytes of one element of a kept activation (the compute dtype).
static size_t act_bytes(const ct_block_ctx *c) { return c->lin->prec.compute == CT_BF16 ? 2 : 4; }

// Columns [col, col + cols) of the kept (N, ld) src into columns [dcol, dcol + cols) of the kept
// (N, dld) dst.
static void copy_cols(const ct_block_ctx *c, void *dst, long dld, long dcol, const void *src, long ld, long col,
                      long cols) {
    size_t e = act_bytes(c);
    c->k->copy_2d((char *)dst + dcol * e, dld * e, (const char *)src + col * e, ld * e, cols * e, c->N);
}

// The same for an fp32 src (N, ld) just computed: narrowed to the compute dtype on the way, as
// ct_keep_activation narrows (through tmp, room for N·ld elements of it, in bf16).
static void put_cols(const ct_block_ctx *c, void *dst, long dld, long dcol, const float *src, long ld, long col,
                     long cols, void *tmp) {
    if (c->lin->prec.compute == CT_BF16) {
        c->k->f32_to_bf16(tmp, src, c->N * ld);
        src = tmp;
    }
    copy_cols(c, dst, dld, dcol, src, ld, col, cols);
}

// How tp splits linear l, for its 8-bit scales (kernels/backend.h ct_f8_split): wqkv and w13 are
// column-parallel (this rank's OC rows), wo and w2 row-parallel (its IC columns). NULL without tp.
static const ct_f8_split *tp_split(const ct_block_ctx *c, ct_block_linear l, ct_f8_split *sp) {
    const ct_tp_ops *tp = &c->ops->tp;
    if (!tp->amax_max) return NULL;
    bool row = l == CT_LINEAR_WO || l == CT_LINEAR_W2;
    *sp = (ct_f8_split){.ic_split = row, .oc_split = !row, .amax_max = tp->amax_max, .ctx = tp->ctx};
    return sp;
}
// W as linear l of block `layer`: which of the stage's packed weights it is (model/weight_packs.h;
// a part of the weight is told apart by its shape there).
static ct_weight block_linear(ct_weight W, int layer, ct_block_linear l) {
    W.pack_id = 1 + layer * CT_BLOCK_LINEARS + l;
    return W;
}
// Linear l of block `layer` at the stage's precision (model/linear.h), as tp splits it.
static void linear_fwd(const ct_block_ctx *c, int layer, ct_block_linear l, float *out, ct_tensor inp, ct_weight W,
                       long OC) {
    W = block_linear(W, layer, l);
    ct_f8_split sp;
    int span = ct_trace_on() ? op_span(linear_span_name(l, true, true, false), layer) : -1;
    ct_linear_fwd(c->lin, f8(c, layer, l), tp_split(c, l, &sp), out, inp, W, OC);
    ct_trace_end(span);
}
static void linear_bwd(const ct_block_ctx *c, int layer, ct_block_linear l, float *dinp, float *dW, const float *dout,
                       ct_tensor inp, ct_weight W, long OC) {
    W = block_linear(W, layer, l);
    ct_f8_split sp;
    int span = ct_trace_on() ? op_span(linear_span_name(l, false, dinp != NULL, dW != NULL), layer) : -1;
    ct_linear_bwd(c->lin, f8(c, layer, l), tp_split(c, l, &sp), dinp, dW, dout, inp, W, OC);
    ct_trace_end(span);
}

// What RoPE rotates by: each sequence's own positions (B, T) where they restart at every document,
// else the (T) positions the sequences share (attention masks by those either way).
static const int32_t *rope_pos(const ct_block_ctx *c) { return c->rope_pos ? c->rope_pos : c->pos; }
static long rope_pos_ld(const ct_block_ctx *c) { return c->rope_pos ? c->T : 0; }

// The call's shape, positions, documents and scratch; its tensors set by the two below.
static ct_attention_args attention_call(const ct_block_ctx *c, int layer, float *lse) {
    const ct_model_config *m = c->cfg;
    long QKV = qkv_dim(c);
    ct_attention_args a = {
        .layer = layer, .B = c->B, .Tq = c->T, .Tk = c->T, .NH = m->n_heads, .NKV = m->n_kv_heads,
        .HS = m->head_dim, .ldq = QKV, .ldk = QKV, .ldv = QKV, .q_pos = c->pos, .k_pos = c->pos,
        .q_doc = c->docs, .k_doc = c->docs, .lse = lse, .scratch = c->scratch,
    };
    return a;
}

// q, k, v inside qkv (N, QKV) fp32; out (N, NH·HS) fp32.
static ct_attention_args attention_args(const ct_block_ctx *c, int layer, const float *qkv, float *out, float *lse) {
    ct_attention_args a = attention_call(c, layer, lse);
    a.q = qkv, a.k = qkv + a.NH * a.HS, a.v = qkv + (a.NH + a.NKV) * a.HS, a.out = out;
    return a;
}

// Whether the attention runs on the kept bf16 q, k, v and writes the kept bf16 output itself:
// under bf16 where the stage's attention has bf16 calls (model/stage_ops.h). Else it runs in
// fp32 on the values the kept copies hold.
static bool bf16_attention(const ct_block_ctx *c) {
    return bf16(c) && c->ops->attention.forward_bf16 && c->ops->attention.backward_bf16;
}

// Whether RoPE runs as the QKV product's rows are narrowed into the kept bf16 qkv (one pass,
// the same bits: kernels/backend.h qkv_rope_to_bf16) rather than in place before.
static bool rope_to_bf16(const ct_block_ctx *c) { return bf16_attention(c) && c->k->qkv_rope_to_bf16; }

// The same call on the kept bf16 qkv (N, QKV) and att (N, NH·HS).
static ct_attention_args attention_args_bf16(const ct_block_ctx *c, int layer, const void *qkv, void *att,
                                             float *lse) {
    const uint16_t *q16 = qkv;
    ct_attention_args a = attention_call(c, layer, lse);
    a.q16 = q16, a.k16 = q16 + a.NH * a.HS, a.v16 = q16 + (a.NH + a.NKV) * a.HS, a.out16 = att;
    return a;
}

// ------------------------------------------------------------------ forward

// kept (N, C) = norm(x) gathered over tp, in the compute dtype; rstd (N_l). The forward and the
// recompute of checkpointed blocks run exactly this. Under bf16 the kernel writes the kept bf16
// copy itself (the fp32 norm's values rounded: nothing in fp32 is written or read back), except
// under sequence parallel, whose gather moves fp32 rows: the norm goes to the local rows, is
// gathered into tmp_full (free between the row-parallel matmuls) and narrowed from there. The
// fp32 work buffer w_norm serves a backend without rmsnorm_forward_bf16.
static void norm_keep(const ct_block_ctx *c, int layer, void *kept, float *rstd, const float *x, const float *weight) {
    const ct_kernels *k = c->k;
    const ct_model_config *m = c->cfg;
    float eps = (float)m->norm_eps;
    int span = op_span("rmsnorm.forward", layer);
    if (bf16(c) && !seq_parallel(c) && k->rmsnorm_forward_bf16) {
        k->rmsnorm_forward_bf16(kept, rstd, x, weight, c->N_local, m->dim, eps);  // (N, C) bf16
        ct_trace_end(span);
        return;
    }
    float *full = !bf16(c) ? kept : seq_parallel(c) ? c->tmp_full : W(c)->w_norm;  // (N, C) fp32
    float *n = norm_out(c, full);
    k->rmsnorm_forward(n, rstd, x, weight, c->N_local, m->dim, eps);
    ct_trace_end(span);
    gather_rows(c, n, full);  // (N, C)
    if (bf16(c)) k->f32_to_bf16(kept, full, c->N * m->dim);
}

// kept h (N, F) = swiglu(h13) in the compute dtype. h13: w13's fp32 product under bf16, narrowed
// into the kept h13_kept on the way and SwiGLU computed from the narrowed values (what the
// backward will see); NULL: from h13_kept as kept (fp32, or a bf16 recompute). Under bf16 the
// kernel reads and writes the bf16 copies itself; a backend without swiglu_forward_bf16 goes
// through the fp32 work buffers w_h13 and w_h (the same bits).
static void swiglu_keep(const ct_block_ctx *c, int layer, void *h_kept, void *h13_kept, const float *h13) {
    const ct_kernels *k = c->k;
    long N = c->N, F = c->cfg->ffn_hidden;
    int span = op_span("swiglu.forward", layer);
    if (!bf16(c)) {
        k->swiglu_forward(h_kept, h13_kept, N, F);  // (N, F)
    } else if (k->swiglu_forward_bf16) {
        k->swiglu_forward_bf16(h_kept, h13_kept, h13, N, F);  // (N, F) bf16
    } else {
        float *wide = W(c)->w_h13, *h = W(c)->w_h;  // (N, 2F), (N, F)
        if (h13) k->f32_to_bf16(h13_kept, h13, N * 2 * F);
        k->bf16_to_f32(wide, h13_kept, N * 2 * F);
        k->swiglu_forward(h, wide, N, F);
        k->f32_to_bf16(h_kept, h, N * F);
    }
    ct_trace_end(span);
}

void ct_llama3_swiglu_backward(const ct_block_ctx *c, float *dh13, const float *dh, const void *h13, long F) {
    const ct_kernels *k = c->k;
    long N = c->N;
    if (!bf16(c)) {
        k->swiglu_backward(dh13, dh, h13, N, F);
    } else if (k->swiglu_backward_bf16) {
        k->swiglu_backward_bf16(dh13, dh, h13, N, F);
    } else {
        k->bf16_to_f32(W(c)->w_h13, h13, N * 2 * F);
        k->swiglu_backward(dh13, dh, W(c)->w_h13, N, F);
    }
}

// Whether a fused kernel may replace the chain around linear l: the fp32 kernels where the
// matmul runs in fp32 (not bf16, not 8-bit).
static bool fuse(const ct_block_ctx *c, int layer, ct_block_linear l) {
    return c->fused && c->lin->prec.compute == CT_F32 && !f8(c, layer, l);
}
// The stage's packing of linear l's weight W (OC, IC) for `use` (model/weight_packs.h), or NULL.
static const void *packed_weight(const ct_block_ctx *c, int layer, ct_block_linear l, ct_pack_use use,
                                 const uint16_t *w16, long OC, long IC) {
    return ct_weight_packs_get(c->lin->packs, layer, l, use, w16, OC, IC);
}
// The bf16 kernels (kernels.h, "fused forward chains in bf16") where linear l runs in bf16 on its
// gathered bf16 weight (view v) and the backend has the kernel.
static bool fuse_bf16(const ct_block_ctx *c, int layer, ct_block_linear l, const ct_block_weights *w, int v,
                      bool has_kernel) {
    return c->fused && bf16(c) && !f8(c, layer, l) && w->t16[v] && has_kernel;
}

// ------------------------------------------------------------------ QK-norm (Qwen3)

// H heads of qkv (N, QKV) starting at column col, as (N·H, HS) contiguous rows in rows; and back.
// The norm runs over rows of HS values, one per head, so the heads are gathered first.
static void heads_out(const ct_block_ctx *c, float *rows, const float *qkv, long col, long H) {
    size_t w = (size_t)(H * c->cfg->head_dim) * sizeof(float);
    c->k->copy_2d(rows, w, qkv + col, (size_t)qkv_dim(c) * sizeof(float), w, c->N);
}
static void heads_in(const ct_block_ctx *c, float *qkv, long col, const float *rows, long H) {
    size_t w = (size_t)(H * c->cfg->head_dim) * sizeof(float);
    c->k->copy_2d(qkv + col, (size_t)qkv_dim(c) * sizeof(float), rows, w, w, c->N);
}

// Each q head and each k head of qkv (N, QKV) normed over its HS values (RMSNorm, the model's
// eps, one weight vector per kind shared by the heads), in place; what wqkv wrote is kept for
// the backward with the norm's statistics.
static void qk_norm_forward(const ct_block_ctx *c, int layer, ct_llama3_acts *s, const ct_block_weights *w, float *qkv) {
    const ct_model_config *m = c->cfg;
    long N = c->N, HS = m->head_dim, NH = m->n_heads, NKV = m->n_kv_heads;
    float *y = W(c)->qk_tmp, eps = (float)m->norm_eps;  // (N·NH, HS), then (N·NKV, HS)
    int span = op_span("qk_norm.forward", layer);
    heads_out(c, s->q_raw, qkv, 0, NH);
    c->k->rmsnorm_forward(y, s->q_rstd, s->q_raw, w->t[LLAMA3_Q_NORM], N * NH, HS, eps);
    heads_in(c, qkv, 0, y, NH);
    heads_out(c, s->k_raw, qkv, NH * HS, NKV);
    c->k->rmsnorm_forward(y, s->k_rstd, s->k_raw, w->t[LLAMA3_K_NORM], N * NKV, HS, eps);
    heads_in(c, qkv, NH * HS, y, NKV);
    ct_trace_end(span);
}

// dqkv's q and k parts, on entry the gradients of the normed heads, on exit those of what wqkv
// wrote; the norm weights' gradients added into gw (NULL views: not now).
static void qk_norm_backward(const ct_block_ctx *c, int layer, const ct_llama3_acts *s, const ct_block_weights *w,
                             ct_block_weights *gw, float *dqkv) {
    const ct_model_config *m = c->cfg;
    long N = c->N, HS = m->head_dim;
    const struct {
        long col, H;
        const float *raw, *rstd;
        int view;
    } part[2] = {{0, m->n_heads, s->q_raw, s->q_rstd, LLAMA3_Q_NORM},
                 {(long)m->n_heads * HS, m->n_kv_heads, s->k_raw, s->k_rstd, LLAMA3_K_NORM}};
    float *dy = W(c)->qk_tmp, *dx = dy + N * (m->n_heads + m->n_kv_heads) * HS;  // (N·H, HS) each
    int span = op_span("qk_norm.backward", layer);
    for (int i = 0; i < 2; i++) {
        heads_out(c, dy, dqkv, part[i].col, part[i].H);
        c->k->zero(dx, (size_t)(N * part[i].H * HS) * sizeof(float));
        c->k->rmsnorm_backward(dx, gw->t[part[i].view], dy, part[i].raw, w->t[part[i].view], part[i].rstd,
                               N * part[i].H, HS);
        heads_in(c, dqkv, part[i].col, dx, part[i].H);
    }
    ct_trace_end(span);
}

// norm1 -> the QKV matmul -> (qk_norm) -> RoPE. Fused (--compile.enable): without sequence
// parallel the whole chain is one product (rmsnorm_linear_rope_forward: the norm computed
// straight into the matmul's input rows, RoPE applied to its output rows); with it the norm's
// output is gathered over tp first, so only RoPE is fused into the matmul's output. The fused
// kernels have no place for the per-head norms between the matmul and RoPE, so qk_norm runs the
// chain unfused. Under bf16, fused, the product's rows are rotated and narrowed into the kept bf16
// qkv as they are final (linear_rope_forward_bf16; the norm is kept in bf16 first): returns
// whether it did (qkv, fp32, was then only room for the product).
static bool attention_in(const ct_block_ctx *c, int layer, ct_llama3_acts *s, const ct_block_weights *w, float *qkv) {
    const ct_kernels *k = c->k;
    const ct_model_config *m = c->cfg;
    long B = c->B, T = c->T, N = c->N, C = m->dim, HS = m->head_dim, NH = m->n_heads, NKV = m->n_kv_heads;
    long QKV = qkv_dim(c);
    bool fused = fuse(c, layer, CT_LINEAR_WQKV) && !m->qk_norm;
    if (fused && !seq_parallel(c)) {
        int span = op_span("rmsnorm+attention.wqkv+rope.forward", layer);
        k->rmsnorm_linear_rope_forward(qkv, s->norm1, s->rstd1, s->x, w->t[LLAMA3_ATTN_NORM], w->t[LLAMA3_WQKV], N, C, QKV,
                                       (float)m->norm_eps, c->rope_cos, c->rope_sin, rope_pos(c), rope_pos_ld(c), B,
                                       T, NH, NKV, HS, W(c)->fuse_scratch);
        ct_trace_end(span);
        return false;
    }
    norm_keep(c, layer, s->norm1, s->rstd1, s->x, w->t[LLAMA3_ATTN_NORM]);
    if (fused) {
        int span = op_span("attention.wqkv+rope.forward", layer);
        k->linear_rope_forward(qkv, s->norm1, w->t[LLAMA3_WQKV], N, C, QKV, c->rope_cos, c->rope_sin, rope_pos(c),
                               rope_pos_ld(c), B, T, NH, NKV, HS, W(c)->fuse_scratch);
        ct_trace_end(span);
        return false;
    }
    if (!m->qk_norm && rope_to_bf16(c) &&
        fuse_bf16(c, layer, CT_LINEAR_WQKV, w, LLAMA3_WQKV, k->linear_rope_forward_bf16)) {
        int span = op_span("attention.wqkv+rope.forward", layer);
        k->linear_rope_forward_bf16(s->qkv, qkv, s->norm1, w->t16[LLAMA3_WQKV],
                                    packed_weight(c, layer, CT_LINEAR_WQKV, CT_PACK_FORWARD, w->t16[LLAMA3_WQKV], QKV, C), N, C,
                                    c->rope_cos, c->rope_sin, rope_pos(c), rope_pos_ld(c), B, T, NH, NKV, HS);
        ct_trace_end(span);
        return true;
    }
    linear_fwd(c, layer, CT_LINEAR_WQKV, qkv, act(c, s->norm1, C), ct_block_weight(w, LLAMA3_WQKV), QKV);  // this rank's heads
    if (m->qk_norm) qk_norm_forward(c, layer, s, w, qkv);
    if (rope_to_bf16(c)) return false;  // RoPE as the rows are narrowed (ct_llama3_attention_forward)
    int span = op_span("rope.forward", layer);
    k->rope_forward(qkv, c->rope_cos, c->rope_sin, rope_pos(c), rope_pos_ld(c), B, T, NH, HS, QKV);
    k->rope_forward(qkv + NH * HS, c->rope_cos, c->rope_sin, rope_pos(c), rope_pos_ld(c), B, T, NKV, HS, QKV);
    ct_trace_end(span);
    return false;
}

// x_mid (holding the attention's output, reduced) += x, then norm2 of it. Fused: one pass (under
// bf16 writing the kept bf16 norm, unless sequence parallel gathers the norm's fp32 rows).
static void residual_norm2(const ct_block_ctx *c, int layer, ct_llama3_acts *s, const ct_block_weights *w) {
    const ct_model_config *m = c->cfg;
    if (c->fused && bf16(c) && !seq_parallel(c) && c->k->residual_rmsnorm_forward_bf16) {
        int span = op_span("residual_add+rmsnorm.forward", layer);
        c->k->residual_rmsnorm_forward_bf16(s->x_mid, s->norm2, s->rstd2, s->x_mid, s->x, w->t[LLAMA3_FFN_NORM],
                                            c->N_local, m->dim, (float)m->norm_eps);
        ct_trace_end(span);
        return;
    }
    if (!fuse(c, layer, CT_LINEAR_W13)) {
        int span = op_span("residual_add.forward", layer);
        c->k->add_inplace(s->x_mid, s->x, c->N_local * m->dim);
        ct_trace_end(span);
        norm_keep(c, layer, s->norm2, s->rstd2, s->x_mid, w->t[LLAMA3_FFN_NORM]);
        return;
    }
    float *n = norm_out(c, s->norm2);
    int span = op_span("residual_add+rmsnorm.forward", layer);
    c->k->residual_rmsnorm_forward(s->x_mid, n, s->rstd2, s->x_mid, s->x, w->t[LLAMA3_FFN_NORM], c->N_local, m->dim,
                                   (float)m->norm_eps);
    ct_trace_end(span);
    gather_rows(c, n, s->norm2);
}

// x_mid = x + g(wo(att)), then norm2 of it: the forward, and the per-op recompute from the kept att.
static void attention_out(const ct_block_ctx *c, int layer, ct_llama3_acts *s, const ct_block_weights *w) {
    const ct_model_config *m = c->cfg;
    float *y = partial_out(c, s->x_mid);
    linear_fwd(c, layer, CT_LINEAR_WO, y, act(c, s->att, m->n_heads * m->head_dim), ct_block_weight(w, LLAMA3_WO), m->dim);  // (N, C) partial
    reduce_rows(c, y, s->x_mid);                                                                       // (N_l, C)
    residual_norm2(c, layer, s, w);
}

void ct_llama3_attention_forward(const ct_block_ctx *c, int layer, ct_llama3_acts *s, const ct_block_weights *w) {
    const ct_linear_ctx *L = c->lin;
    const ct_model_config *m = c->cfg;
    long N = c->N, HS = m->head_dim, NH = m->n_heads, QKV = qkv_dim(c);
    float *qkv = work(c, s->qkv, W(c)->w_qkv);
    bool kept = attention_in(c, layer, s, w, qkv);  // (N, QKV) this rank's heads, after RoPE (or kept)
    if (bf16_attention(c)) {  // narrowed once; the attention reads and writes the kept copies
        int span;
        if (!kept) {
            bool rope = rope_to_bf16(c);  // RoPE with the narrowing, in one pass
            span = op_span(rope ? "rope.forward" : "qkv.to_bf16.forward", layer);
            if (rope)
                c->k->qkv_rope_to_bf16(s->qkv, qkv, c->rope_cos, c->rope_sin, rope_pos(c), rope_pos_ld(c), c->B, c->T,
                                       NH, m->n_kv_heads, HS);
            else
                c->k->f32_to_bf16(s->qkv, qkv, N * QKV);
            ct_trace_end(span);
        }
        ct_attention_args a = attention_args_bf16(c, layer, s->qkv, s->att, s->lse);
        span = op_span("attention.forward", layer);
        c->ops->attention.forward_bf16(c->ops->attention.ctx, &a);
        ct_trace_end(span);
    } else {
        ct_keep_activation(L, s->qkv, qkv, N * QKV);
        float *att = work(c, s->att, W(c)->w_att);
        ct_attention_args a = attention_args(c, layer, qkv, att, s->lse);
        int span = op_span("attention.forward", layer);  // context parallel: its exchanges inside
        c->ops->attention.forward(c->ops->attention.ctx, &a);
        ct_trace_end(span);
        ct_keep_activation(L, s->att, att, N * NH * HS);
    }
    if (s->qv) {  // per-op checkpointing keeps q | v; qkv is the shared recompute buffer
        long Q = NH * HS, KV = m->n_kv_heads * HS;
        copy_cols(c, s->qv, Q + KV, 0, s->qkv, QKV, 0, Q);
        copy_cols(c, s->qv, Q + KV, Q, s->qkv, QKV, Q + KV, KV);
    }
    attention_out(c, layer, s, w);
}

static void block_forward(const ct_block_ctx *c, int layer, void *acts, const ct_block_weights *w, float *out) {
    ct_llama3_acts *s = acts;
    const ct_kernels *k = c->k;
    const ct_model_config *m = c->cfg;
    long N = c->N, Nl = c->N_local, C = m->dim, F = m->ffn_hidden;
    ct_llama3_attention_forward(c, layer, s, w);

    // w13's product (N, 2F) fp32: the kept h13 itself in fp32; under bf16 the backward's dh13,
    // free in a forward, from which swiglu_keep narrows it into the kept h13.
    float *h13 = bf16(c) ? W(c)->dh13 : s->h13;
    int span;
    if (fuse(c, layer, CT_LINEAR_W13)) {
        span = op_span("feed_forward.w13+swiglu.forward", layer);
        k->linear_swiglu_forward(h13, s->h, s->norm2, w->t[LLAMA3_W13], N, C, F, W(c)->fuse_scratch);  // (N, 2F), (N, F)
        ct_trace_end(span);
    } else if (fuse_bf16(c, layer, CT_LINEAR_W13, w, LLAMA3_W13, k->linear_swiglu_forward_bf16)) {
        span = op_span("feed_forward.w13+swiglu.forward", layer);
        k->linear_swiglu_forward_bf16(s->h, s->h13, h13, s->norm2, w->t16[LLAMA3_W13],
                                      packed_weight(c, layer, CT_LINEAR_W13, CT_PACK_FORWARD, w->t16[LLAMA3_W13], 2 * F, C), N, C, F);
        ct_trace_end(span);
    } else {
        linear_fwd(c, layer, CT_LINEAR_W13, h13, act(c, s->norm2, C), ct_block_weight(w, LLAMA3_W13), 2 * F);  // (N, 2F)
        swiglu_keep(c, layer, s->h, s->h13, bf16(c) ? h13 : NULL);
    }
    if (s->h1) copy_cols(c, s->h1, F, 0, s->h13, 2 * F, 0, F);  // per-op checkpointing keeps w1's half
    float *y = partial_out(c, out);
    linear_fwd(c, layer, CT_LINEAR_W2, y, act(c, s->h, F), ct_block_weight(w, LLAMA3_W2), C);  // (N, C) partial over tp
    reduce_rows(c, y, out);
    span = op_span("residual_add.forward", layer);
    k->add_inplace(out, s->x_mid, Nl * C);
    ct_trace_end(span);
}

static void recompute_elementwise(const ct_block_ctx *c, int layer, ct_llama3_acts *s, const ct_block_weights *w) {
    norm_keep(c, layer, s->norm1, s->rstd1, s->x, w->t[LLAMA3_ATTN_NORM]);
    norm_keep(c, layer, s->norm2, s->rstd2, s->x_mid, w->t[LLAMA3_FFN_NORM]);
    swiglu_keep(c, layer, s->h, s->h13, NULL);
}

// k again (wk's rows of wqkv, then RoPE) into the shared qkv, beside the kept q and v. An 8-bit
// wqkv's scales span the whole matrix, so there the whole product runs again and k is taken
// from it: the same values either way as the forward's.
static void recompute_k(const ct_block_ctx *c, int layer, ct_llama3_acts *s, const ct_block_weights *w) {
    const ct_model_config *m = c->cfg;
    long C = m->dim, HS = m->head_dim, Q = m->n_heads * HS, KV = m->n_kv_heads * HS, QKV = qkv_dim(c);
    bool whole = f8(c, layer, CT_LINEAR_WQKV);
    long ld = whole ? QKV : KV, col = whole ? Q : 0;
    float *out = W(c)->dqkv;  // (N, ld) fp32: the backward's buffer, free until it starts
    if (whole) linear_fwd(c, layer, CT_LINEAR_WQKV, out, act(c, s->norm1, C), ct_block_weight(w, LLAMA3_WQKV), QKV);
    else linear_fwd(c, layer, CT_LINEAR_WQKV, out, act(c, s->norm1, C), ct_weight_at(ct_block_weight(w, LLAMA3_WQKV), Q * C), KV);
    int span = op_span("rope.forward", layer);
    c->k->rope_forward(out + col, c->rope_cos, c->rope_sin, rope_pos(c), rope_pos_ld(c), c->B, c->T, m->n_kv_heads, HS,
                       ld);
    ct_trace_end(span);
    copy_cols(c, s->qkv, QKV, 0, s->qv, Q + KV, 0, Q);
    put_cols(c, s->qkv, QKV, Q, out, ld, col, KV, W(c)->w_qkv);
    copy_cols(c, s->qkv, QKV, Q + KV, s->qv, Q + KV, Q, KV);
}

// w3's output again (w3's rows of w13) into the shared h13 beside the kept w1 half, then h. An
// 8-bit w13 runs whole, as recompute_k says.
static void recompute_h(const ct_block_ctx *c, int layer, ct_llama3_acts *s, const ct_block_weights *w) {
    long C = c->cfg->dim, F = c->cfg->ffn_hidden;
    bool whole = f8(c, layer, CT_LINEAR_W13);
    long ld = whole ? 2 * F : F, col = whole ? F : 0;
    // (N, ld) fp32 and room for it in bf16 (N·ld/2 floats), both free until the backward starts
    float *out = whole ? W(c)->dh13 : W(c)->dh, *tmp = whole ? W(c)->dh : W(c)->dh13;
    if (whole) linear_fwd(c, layer, CT_LINEAR_W13, out, act(c, s->norm2, C), ct_block_weight(w, LLAMA3_W13), 2 * F);
    else linear_fwd(c, layer, CT_LINEAR_W13, out, act(c, s->norm2, C), ct_weight_at(ct_block_weight(w, LLAMA3_W13), F * C), F);
    copy_cols(c, s->h13, 2 * F, 0, s->h1, F, 0, F);
    put_cols(c, s->h13, 2 * F, F, out, ld, col, F, tmp);
    swiglu_keep(c, layer, s->h, s->h13, NULL);
}

static void recompute_ops(const ct_block_ctx *c, int layer, ct_llama3_acts *s, const ct_block_weights *w) {
    norm_keep(c, layer, s->norm1, s->rstd1, s->x, w->t[LLAMA3_ATTN_NORM]);
    recompute_k(c, layer, s, w);
    attention_out(c, layer, s, w);
    recompute_h(c, layer, s, w);
}

// ------------------------------------------------------------------ backward

// The residual gradient on all N rows, as the row-parallel matmul's output gradient: gathered
// under sequence parallel (into `keep` when the split backward keeps it), else dres itself --
// copied when kept, because dres changes before the weight pass runs.
static const float *output_grad(const ct_block_ctx *c, float *dres, float *keep) {
    if (seq_parallel(c)) {
        float *dy = keep ? keep : c->tmp_full;
        gather_rows(c, dres, dy);  // backward of g
        return dy;
    }
    if (!keep) return dres;
    c->k->copy(keep, dres, (size_t)(c->N * c->cfg->dim) * sizeof(float));
    return keep;
}

// A column-parallel matmul's input gradient (N, C) is partial over tp; reduce it into the norm's
// output gradient (N_l, C). Returns that gradient; `kept` receives it in the split backward.
static const float *norm_grad(const ct_block_ctx *c, float **dfull, float *kept) {
    float *dn = kept ? kept : norm_out(c, c->dnorm);
    *dfull = seq_parallel(c) ? c->dnorm : dn;  // where the matmul writes (N, C)
    return dn;
}

// A column-parallel matmul's backward followed by the tp reduction of its input gradient
// (dfull, partial over tp, into dn): with async comm the reduction is started as soon as dfull
// is computed and finished after the weight gradient's matmul, which needs none of it. The same
// operations either way, so the same bits.
static void column_linear_bwd(const ct_block_ctx *c, int layer, ct_block_linear l, float *dfull, float *dW,
                              const float *dout, ct_tensor inp, ct_weight W, long OC, float *dn) {
    const ct_tp_ops *tp = &c->ops->tp;
    if (!dW || !tp->reduce_rows_start) {
        linear_bwd(c, layer, l, dfull, dW, dout, inp, W, OC);
        reduce_rows(c, dfull, dn);
        return;
    }
    linear_bwd(c, layer, l, dfull, NULL, dout, inp, W, OC);
    tp->reduce_rows_start(tp->ctx, dfull, dn, c->N_local, c->cfg->dim);
    linear_bwd(c, layer, l, NULL, dW, dout, inp, (ct_weight){0}, OC);  // (an 8-bit amax reduction may run meanwhile)
    tp->reduce_rows_wait(tp->ctx);
}

static void block_backward(const ct_block_ctx *c, int layer, const void *acts, const ct_block_weights *w,
                           ct_block_weights *g, void *keep_record, float *dres) {
    const ct_llama3_acts *s = acts;
    ct_llama3_wgrad *keep = keep_record;
    const ct_kernels *k = c->k;
    const ct_model_config *m = c->cfg;
    long Nl = c->N_local, C = m->dim, F = m->ffn_hidden;
    bool split = keep != NULL;
    ct_block_weights none = {0};
    ct_block_weights *gw = split ? &none : g;  // weight gradients now, or later from `keep`
    float *dh13 = split ? keep->dh13 : W(c)->dh13;
    float *dfull;

    // feed-forward: out = x_mid + g(w2(swiglu(w13(f(norm2(x_mid))))))
    const float *dy = output_grad(c, dres, split ? keep->dy_ffn : NULL);
    int span;
    if (fuse_bf16(c, layer, CT_LINEAR_W2, w, LLAMA3_W2, k->linear_swiglu_backward_bf16)) {
        // w2's input gradient handed to SwiGLU's backward from the gemm's epilogue; its weight
        // gradient apart (now, or in the weight pass)
        span = op_span("feed_forward.w2.backward_input+swiglu.backward", layer);
        uint16_t *dy16 = c->lin->g16;  // (N, C)
        k->f32_to_bf16(dy16, dy, c->N * C);
        k->linear_swiglu_backward_bf16(dh13, W(c)->dh, dy16, w->t16[LLAMA3_W2],
                                       packed_weight(c, layer, CT_LINEAR_W2, CT_PACK_INPUT_GRAD, w->t16[LLAMA3_W2], C, F),
                                       s->h13, c->N, C, F);
        ct_trace_end(span);
        if (gw->t[LLAMA3_W2])
            linear_bwd(c, layer, CT_LINEAR_W2, NULL, gw->t[LLAMA3_W2], dy, act(c, s->h, F), (ct_weight){0}, C);
    } else {
        linear_bwd(c, layer, CT_LINEAR_W2, W(c)->dh, gw->t[LLAMA3_W2], dy, act(c, s->h, F), ct_block_weight(w, LLAMA3_W2), C);
        span = op_span("swiglu.backward", layer);
        ct_llama3_swiglu_backward(c, dh13, W(c)->dh, s->h13, F);
        ct_trace_end(span);
    }
    const float *dn = norm_grad(c, &dfull, split ? keep->dn2 : NULL);
    // backward of f: the partial input gradients summed over tp
    column_linear_bwd(c, layer, CT_LINEAR_W13, dfull, gw->t[LLAMA3_W13], dh13, act(c, s->norm2, C), ct_block_weight(w, LLAMA3_W13), 2 * F, (float *)dn);
    span = op_span(split ? "rmsnorm.backward_input" : "rmsnorm.backward", layer);
    k->rmsnorm_backward(dres, gw->t[LLAMA3_FFN_NORM], dn, s->x_mid, w->t[LLAMA3_FFN_NORM], s->rstd2, Nl, C);
    ct_trace_end(span);
    ct_llama3_attention_backward(c, layer, s, w, gw, keep, dres);
}

void ct_llama3_attention_backward(const ct_block_ctx *c, int layer, const ct_llama3_acts *s, const ct_block_weights *w,
                                  ct_block_weights *gw, ct_llama3_wgrad *keep, float *dres) {
    const ct_kernels *k = c->k;
    const ct_linear_ctx *L = c->lin;
    const ct_model_config *m = c->cfg;
    long B = c->B, T = c->T, N = c->N, Nl = c->N_local, C = m->dim, HS = m->head_dim, NH = m->n_heads;
    long NKV = m->n_kv_heads, QKV = qkv_dim(c);
    bool split = keep != NULL;
    // The split backward's weight pass has no record of the q/k norms' gradients (the families
    // with qk_norm do not run split backward: their supports).
    if (split && m->qk_norm) ct_fatal("llama3", "qk_norm with a split backward");
    float *dqkv = split ? keep->dqkv : W(c)->dqkv;
    float *dfull;
    // attention: x_mid = x + g(wo(attention(rope(wqkv(f(norm1(x)))))))
    const float *dy = output_grad(c, dres, split ? keep->dy_att : NULL);
    linear_bwd(c, layer, CT_LINEAR_WO, W(c)->datt, gw->t[LLAMA3_WO], dy, act(c, s->att, NH * HS), ct_block_weight(w, LLAMA3_WO), C);
    k->zero(dqkv, (size_t)(N * QKV) * sizeof(float));
    float *dq = dqkv, *dk = dqkv + NH * HS, *dv = dqkv + (NH + NKV) * HS;
    int span = op_span("attention.backward", layer);
    if (bf16_attention(c)) {
        ct_attention_args a = attention_args_bf16(c, layer, s->qkv, s->att, s->lse);
        c->ops->attention.backward_bf16(c->ops->attention.ctx, &a, W(c)->datt, dq, dk, dv);
    } else {
        const float *qkv = ct_kept_as_f32(L, s->qkv, W(c)->w_qkv, N * QKV);
        float *att = (float *)ct_kept_as_f32(L, s->att, W(c)->w_att, N * NH * HS);
        ct_attention_args a = attention_args(c, layer, qkv, att, s->lse);
        c->ops->attention.backward(c->ops->attention.ctx, &a, W(c)->datt, dq, dk, dv);
    }
    ct_trace_end(span);
    span = op_span("rope.backward", layer);
    k->rope_backward(dq, c->rope_cos, c->rope_sin, rope_pos(c), rope_pos_ld(c), B, T, NH, HS, QKV);
    k->rope_backward(dk, c->rope_cos, c->rope_sin, rope_pos(c), rope_pos_ld(c), B, T, NKV, HS, QKV);
    ct_trace_end(span);
    if (m->qk_norm) qk_norm_backward(c, layer, s, w, gw, dqkv);
    const float *dn = norm_grad(c, &dfull, split ? keep->dn1 : NULL);
    column_linear_bwd(c, layer, CT_LINEAR_WQKV, dfull, gw->t[LLAMA3_WQKV], dqkv, act(c, s->norm1, C), ct_block_weight(w, LLAMA3_WQKV), QKV, (float *)dn);
    span = op_span(split ? "rmsnorm.backward_input" : "rmsnorm.backward", layer);
    k->rmsnorm_backward(dres, gw->t[LLAMA3_ATTN_NORM], dn, s->x, w->t[LLAMA3_ATTN_NORM], s->rstd1, Nl, C);
    ct_trace_end(span);
}

static void block_backward_weight(const ct_block_ctx *c, int layer, const void *acts, const void *keep_record,
                                  ct_block_weights *g) {
    const ct_llama3_acts *s = acts;
    const ct_llama3_wgrad *kept = keep_record;
    const ct_kernels *k = c->k;
    const ct_model_config *m = c->cfg;
    long Nl = c->N_local, C = m->dim, HS = m->head_dim, NH = m->n_heads, F = m->ffn_hidden, QKV = qkv_dim(c);
    // The same gemms and column passes the combined backward runs, so the gradients are the
    // same bits whichever way a schedule computes them.
    linear_bwd(c, layer, CT_LINEAR_W2, NULL, g->t[LLAMA3_W2], kept->dy_ffn, act(c, s->h, F), (ct_weight){0}, C);
    linear_bwd(c, layer, CT_LINEAR_W13, NULL, g->t[LLAMA3_W13], kept->dh13, act(c, s->norm2, C), (ct_weight){0}, 2 * F);
    int span = op_span("rmsnorm.backward_weight", layer);
    k->rmsnorm_backward(NULL, g->t[LLAMA3_FFN_NORM], kept->dn2, s->x_mid, NULL, s->rstd2, Nl, C);
    ct_trace_end(span);
    linear_bwd(c, layer, CT_LINEAR_WO, NULL, g->t[LLAMA3_WO], kept->dy_att, act(c, s->att, NH * HS), (ct_weight){0}, C);
    linear_bwd(c, layer, CT_LINEAR_WQKV, NULL, g->t[LLAMA3_WQKV], kept->dqkv, act(c, s->norm1, C), (ct_weight){0}, QKV);
    span = op_span("rmsnorm.backward_weight", layer);
    k->rmsnorm_backward(NULL, g->t[LLAMA3_ATTN_NORM], kept->dn1, s->x, NULL, s->rstd1, Nl, C);
    ct_trace_end(span);
}

static void block_recompute(const ct_block_ctx *c, int layer, ct_ac_kind kind, void *acts, const ct_block_weights *w) {
    if (kind == CT_AC_OPS) recompute_ops(c, layer, acts, w);
    else if (kind == CT_AC_ELEMENTWISE) recompute_elementwise(c, layer, acts, w);
}

const ct_block_ops ct_llama3_block = {
    .acts_size = sizeof(ct_llama3_acts),
    .wgrad_size = sizeof(ct_llama3_wgrad),
    .work_size = sizeof(ct_llama3_work),
    .linears = ct_llama3_block_linears,
    .carve_work = ct_llama3_carve_work,
    .carve_acts = ct_llama3_carve_acts,
    .carve_wgrad = ct_llama3_carve_wgrad,
    .forward = block_forward,
    .recompute = block_recompute,
    .backward = block_backward,
    .backward_weight = block_backward_weight,
    .kept_bytes_per_token = ct_llama3_kept_bytes_per_token,
    .recompute_flops_per_token = ct_llama3_recompute_flops_per_token,
};
