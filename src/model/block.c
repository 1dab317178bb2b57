#include "model/block.h"

#include <stdbool.h>

#include "core/trace.h"

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

// The kept activation's buffer for computing in fp32: itself in fp32, else the work buffer.
static float *work(const ct_block_ctx *c, void *kept, float *w) { return c->lin->prec.compute == CT_BF16 ? w : kept; }
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
// Linear l of block `layer` at the stage's precision (model/linear.h), as tp splits it.
static void linear_fwd(const ct_block_ctx *c, int layer, ct_block_linear l, float *out, ct_tensor inp, const float *W,
                       long OC) {
    ct_f8_split sp;
    int span = ct_trace_on() ? op_span(linear_span_name(l, true, true, false), layer) : -1;
    ct_linear_fwd(c->lin, f8(c, layer, l), tp_split(c, l, &sp), out, inp, W, OC);
    ct_trace_end(span);
}
static void linear_bwd(const ct_block_ctx *c, int layer, ct_block_linear l, float *dinp, float *dW, const float *dout,
                       ct_tensor inp, const float *W, long OC) {
    ct_f8_split sp;
    int span = ct_trace_on() ? op_span(linear_span_name(l, false, dinp != NULL, dW != NULL), layer) : -1;
    ct_linear_bwd(c->lin, f8(c, layer, l), tp_split(c, l, &sp), dinp, dW, dout, inp, W, OC);
    ct_trace_end(span);
}

// q, k, v inside qkv (N, QKV) fp32; out (N, NH·HS) fp32.
// What RoPE rotates by: each sequence's own positions (B, T) where they restart at every document,
// else the (T) positions the sequences share (attention masks by those either way).
static const int32_t *rope_pos(const ct_block_ctx *c) { return c->rope_pos ? c->rope_pos : c->pos; }
static long rope_pos_ld(const ct_block_ctx *c) { return c->rope_pos ? c->T : 0; }

static ct_attention_args attention_args(const ct_block_ctx *c, int layer, const float *qkv, float *out, float *lse) {
    const ct_model_config *m = c->cfg;
    long HS = m->head_dim, NH = m->n_heads, NKV = m->n_kv_heads, QKV = c->qkv_dim;
    ct_attention_args a = {
        .layer = layer, .B = c->B, .Tq = c->T, .Tk = c->T, .NH = NH, .NKV = NKV, .HS = HS,
        .q = qkv, .k = qkv + NH * HS, .v = qkv + (NH + NKV) * HS, .ldq = QKV, .ldk = QKV, .ldv = QKV,
        .q_pos = c->pos, .k_pos = c->pos, .q_doc = c->docs, .k_doc = c->docs, .out = out, .lse = lse, .scratch = c->scratch,
    };
    return a;
}

// ------------------------------------------------------------------ forward

// kept (N, C) = norm(x) gathered over tp, narrowed to the compute dtype; rstd (N_l). The forward
// and the recompute of checkpointed blocks run exactly this.
static void norm_keep(const ct_block_ctx *c, int layer, void *kept, float *rstd, const float *x, const float *weight) {
    const ct_model_config *m = c->cfg;
    float *full = work(c, kept, c->w_norm), *n = norm_out(c, full);
    int span = op_span("rmsnorm.forward", layer);
    c->k->rmsnorm_forward(n, rstd, x, weight, c->N_local, m->dim, (float)m->norm_eps);
    ct_trace_end(span);
    gather_rows(c, n, full);  // (N, C)
    ct_keep_activation(c->lin, kept, full, c->N * m->dim);
}

// kept h (N, F) = swiglu(h13), from the fp32 values of h13 (the work buffer in the forward, the
// widened kept copy in a recompute: the same numbers).
static void swiglu_keep(const ct_block_ctx *c, int layer, void *h_kept, const float *h13) {
    long N = c->N, F = c->cfg->ffn_hidden;
    float *h = work(c, h_kept, c->w_h);
    int span = op_span("swiglu.forward", layer);
    c->k->swiglu_forward(h, h13, N, F);  // (N, F)
    ct_trace_end(span);
    ct_keep_activation(c->lin, h_kept, h, N * F);
}

// Whether a fused kernel may replace the chain around linear l: the fused kernels are fp32, so
// only where the matmul runs in fp32 (not bf16, not 8-bit).
static bool fuse(const ct_block_ctx *c, int layer, ct_block_linear l) {
    return c->fused && c->lin->prec.compute == CT_F32 && !f8(c, layer, l);
}

// norm1 -> the QKV matmul -> RoPE. Fused (--compile.enable): without sequence parallel the whole
// chain is one product (rmsnorm_linear_rope_forward: the norm computed straight into the
// matmul's input rows, RoPE applied to its output rows); with it the norm's output is gathered
// over tp first, so only RoPE is fused into the matmul's output.
static void attention_in(const ct_block_ctx *c, int layer, ct_block_acts *s, const ct_block_weights *w, float *qkv) {
    const ct_kernels *k = c->k;
    const ct_model_config *m = c->cfg;
    long B = c->B, T = c->T, N = c->N, C = m->dim, HS = m->head_dim, NH = m->n_heads, NKV = m->n_kv_heads;
    long QKV = c->qkv_dim;
    bool fused = fuse(c, layer, CT_LINEAR_WQKV);
    if (fused && !seq_parallel(c)) {
        int span = op_span("rmsnorm+attention.wqkv+rope.forward", layer);
        k->rmsnorm_linear_rope_forward(qkv, s->norm1, s->rstd1, s->x, w->attn_norm, w->wqkv, N, C, QKV,
                                       (float)m->norm_eps, c->rope_cos, c->rope_sin, rope_pos(c), rope_pos_ld(c), B,
                                       T, NH, NKV, HS, c->fuse_scratch);
        ct_trace_end(span);
        return;
    }
    norm_keep(c, layer, s->norm1, s->rstd1, s->x, w->attn_norm);
    if (fused) {
        int span = op_span("attention.wqkv+rope.forward", layer);
        k->linear_rope_forward(qkv, s->norm1, w->wqkv, N, C, QKV, c->rope_cos, c->rope_sin, rope_pos(c),
                               rope_pos_ld(c), B, T, NH, NKV, HS, c->fuse_scratch);
        ct_trace_end(span);
        return;
    }
    linear_fwd(c, layer, CT_LINEAR_WQKV, qkv, act(c, s->norm1, C), w->wqkv, QKV);  // this rank's heads
    int span = op_span("rope.forward", layer);
    k->rope_forward(qkv, c->rope_cos, c->rope_sin, rope_pos(c), rope_pos_ld(c), B, T, NH, HS, QKV);
    k->rope_forward(qkv + NH * HS, c->rope_cos, c->rope_sin, rope_pos(c), rope_pos_ld(c), B, T, NKV, HS, QKV);
    ct_trace_end(span);
}

// x_mid (holding the attention's output, reduced) += x, then norm2 of it. Fused: one pass.
static void residual_norm2(const ct_block_ctx *c, int layer, ct_block_acts *s, const ct_block_weights *w) {
    const ct_model_config *m = c->cfg;
    if (!fuse(c, layer, CT_LINEAR_W13)) {
        int span = op_span("residual_add.forward", layer);
        c->k->add_inplace(s->x_mid, s->x, c->N_local * m->dim);
        ct_trace_end(span);
        norm_keep(c, layer, s->norm2, s->rstd2, s->x_mid, w->ffn_norm);
        return;
    }
    float *n = norm_out(c, s->norm2);
    int span = op_span("residual_add+rmsnorm.forward", layer);
    c->k->residual_rmsnorm_forward(s->x_mid, n, s->rstd2, s->x_mid, s->x, w->ffn_norm, c->N_local, m->dim,
                                   (float)m->norm_eps);
    ct_trace_end(span);
    gather_rows(c, n, s->norm2);
}

// x_mid = x + g(wo(att)), then norm2 of it: the forward, and the per-op recompute from the kept att.
static void attention_out(const ct_block_ctx *c, int layer, ct_block_acts *s, const ct_block_weights *w) {
    const ct_model_config *m = c->cfg;
    float *y = partial_out(c, s->x_mid);
    linear_fwd(c, layer, CT_LINEAR_WO, y, act(c, s->att, m->n_heads * m->head_dim), w->wo, m->dim);  // (N, C) partial
    reduce_rows(c, y, s->x_mid);                                                                       // (N_l, C)
    residual_norm2(c, layer, s, w);
}

void ct_block_forward(const ct_block_ctx *c, int layer, ct_block_acts *s, const ct_block_weights *w, float *out) {
    const ct_kernels *k = c->k;
    const ct_linear_ctx *L = c->lin;
    const ct_model_config *m = c->cfg;
    long N = c->N, Nl = c->N_local, C = m->dim, HS = m->head_dim, NH = m->n_heads, F = m->ffn_hidden;
    long QKV = c->qkv_dim;

    float *qkv = work(c, s->qkv, c->w_qkv);
    attention_in(c, layer, s, w, qkv);  // (N, QKV) this rank's heads, after RoPE
    ct_keep_activation(L, s->qkv, qkv, N * QKV);
    float *att = work(c, s->att, c->w_att);
    ct_attention_args a = attention_args(c, layer, qkv, att, s->lse);
    int span = op_span("attention.forward", layer);  // context parallel: its exchanges inside
    c->ops->attention.forward(c->ops->attention.ctx, &a);
    ct_trace_end(span);
    ct_keep_activation(L, s->att, att, N * NH * HS);
    if (s->qv) {  // per-op checkpointing keeps q | v; qkv is the shared recompute buffer
        long Q = NH * HS, KV = m->n_kv_heads * HS;
        copy_cols(c, s->qv, Q + KV, 0, s->qkv, QKV, 0, Q);
        copy_cols(c, s->qv, Q + KV, Q, s->qkv, QKV, Q + KV, KV);
    }
    attention_out(c, layer, s, w);

    float *h13 = work(c, s->h13, c->w_h13);
    if (fuse(c, layer, CT_LINEAR_W13)) {
        span = op_span("feed_forward.w13+swiglu.forward", layer);
        k->linear_swiglu_forward(h13, s->h, s->norm2, w->w13, N, C, F, c->fuse_scratch);  // (N, 2F), (N, F)
        ct_trace_end(span);
    } else {
        linear_fwd(c, layer, CT_LINEAR_W13, h13, act(c, s->norm2, C), w->w13, 2 * F);  // (N, 2F)
        ct_keep_activation(L, s->h13, h13, N * 2 * F);
        swiglu_keep(c, layer, s->h, h13);
    }
    if (s->h1) copy_cols(c, s->h1, F, 0, s->h13, 2 * F, 0, F);  // per-op checkpointing keeps w1's half
    float *y = partial_out(c, out);
    linear_fwd(c, layer, CT_LINEAR_W2, y, act(c, s->h, F), w->w2, C);  // (N, C) partial over tp
    reduce_rows(c, y, out);
    span = op_span("residual_add.forward", layer);
    k->add_inplace(out, s->x_mid, Nl * C);
    ct_trace_end(span);
}

void ct_block_recompute_elementwise(const ct_block_ctx *c, int layer, ct_block_acts *s, const ct_block_weights *w) {
    long N = c->N, F = c->cfg->ffn_hidden;
    norm_keep(c, layer, s->norm1, s->rstd1, s->x, w->attn_norm);
    norm_keep(c, layer, s->norm2, s->rstd2, s->x_mid, w->ffn_norm);
    swiglu_keep(c, layer, s->h, ct_kept_as_f32(c->lin, s->h13, c->w_h13, N * 2 * F));
}

// k again (wk's rows of wqkv, then RoPE) into the shared qkv, beside the kept q and v. An 8-bit
// wqkv's scales span the whole matrix, so there the whole product runs again and k is taken
// from it: the same values either way as the forward's.
static void recompute_k(const ct_block_ctx *c, int layer, ct_block_acts *s, const ct_block_weights *w) {
    const ct_model_config *m = c->cfg;
    long C = m->dim, HS = m->head_dim, Q = m->n_heads * HS, KV = m->n_kv_heads * HS, QKV = c->qkv_dim;
    bool whole = f8(c, layer, CT_LINEAR_WQKV);
    long ld = whole ? QKV : KV, col = whole ? Q : 0;
    float *out = c->dqkv;  // (N, ld) fp32: the backward's buffer, free until it starts
    if (whole) linear_fwd(c, layer, CT_LINEAR_WQKV, out, act(c, s->norm1, C), w->wqkv, QKV);
    else linear_fwd(c, layer, CT_LINEAR_WQKV, out, act(c, s->norm1, C), w->wqkv + Q * C, KV);
    int span = op_span("rope.forward", layer);
    c->k->rope_forward(out + col, c->rope_cos, c->rope_sin, rope_pos(c), rope_pos_ld(c), c->B, c->T, m->n_kv_heads, HS,
                       ld);
    ct_trace_end(span);
    copy_cols(c, s->qkv, QKV, 0, s->qv, Q + KV, 0, Q);
    put_cols(c, s->qkv, QKV, Q, out, ld, col, KV, c->w_qkv);
    copy_cols(c, s->qkv, QKV, Q + KV, s->qv, Q + KV, Q, KV);
}

// w3's output again (w3's rows of w13) into the shared h13 beside the kept w1 half, then h. An
// 8-bit w13 runs whole, as recompute_k says.
static void recompute_h(const ct_block_ctx *c, int layer, ct_block_acts *s, const ct_block_weights *w) {
    long N = c->N, C = c->cfg->dim, F = c->cfg->ffn_hidden;
    bool whole = f8(c, layer, CT_LINEAR_W13);
    long ld = whole ? 2 * F : F, col = whole ? F : 0;
    float *out = whole ? c->dh13 : c->dh;  // (N, ld) fp32, free until the backward starts
    if (whole) linear_fwd(c, layer, CT_LINEAR_W13, out, act(c, s->norm2, C), w->w13, 2 * F);
    else linear_fwd(c, layer, CT_LINEAR_W13, out, act(c, s->norm2, C), w->w13 + F * C, F);
    copy_cols(c, s->h13, 2 * F, 0, s->h1, F, 0, F);
    put_cols(c, s->h13, 2 * F, F, out, ld, col, F, c->w_h13);
    swiglu_keep(c, layer, s->h, ct_kept_as_f32(c->lin, s->h13, c->w_h13, N * 2 * F));
}

void ct_block_recompute_ops(const ct_block_ctx *c, int layer, ct_block_acts *s, const ct_block_weights *w) {
    norm_keep(c, layer, s->norm1, s->rstd1, s->x, w->attn_norm);
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
                              const float *dout, ct_tensor inp, const float *W, long OC, float *dn) {
    const ct_tp_ops *tp = &c->ops->tp;
    if (!dW || !tp->reduce_rows_start) {
        linear_bwd(c, layer, l, dfull, dW, dout, inp, W, OC);
        reduce_rows(c, dfull, dn);
        return;
    }
    linear_bwd(c, layer, l, dfull, NULL, dout, inp, W, OC);
    tp->reduce_rows_start(tp->ctx, dfull, dn, c->N_local, c->cfg->dim);
    linear_bwd(c, layer, l, NULL, dW, dout, inp, NULL, OC);  // (an 8-bit amax reduction may run meanwhile)
    tp->reduce_rows_wait(tp->ctx);
}

void ct_block_backward(const ct_block_ctx *c, int layer, const ct_block_acts *s, const ct_block_weights *w,
                       ct_block_weights *g, ct_block_wgrad_inputs *keep, float *dres) {
    const ct_kernels *k = c->k;
    const ct_linear_ctx *L = c->lin;
    const ct_model_config *m = c->cfg;
    long B = c->B, T = c->T, N = c->N, Nl = c->N_local, C = m->dim, HS = m->head_dim, NH = m->n_heads;
    long NKV = m->n_kv_heads, F = m->ffn_hidden, QKV = c->qkv_dim;
    bool split = keep != NULL;
    ct_block_weights none = {0};
    ct_block_weights *gw = split ? &none : g;  // weight gradients now, or later from `keep`
    float *dh13 = split ? keep->dh13 : c->dh13;
    float *dqkv = split ? keep->dqkv : c->dqkv;
    float *dfull;

    // feed-forward: out = x_mid + g(w2(swiglu(w13(f(norm2(x_mid))))))
    const float *dy = output_grad(c, dres, split ? keep->dy_ffn : NULL);
    linear_bwd(c, layer, CT_LINEAR_W2, c->dh, gw->w2, dy, act(c, s->h, F), w->w2, C);
    const float *h13 = ct_kept_as_f32(L, s->h13, c->w_h13, N * 2 * F);
    int span = op_span("swiglu.backward", layer);
    k->swiglu_backward(dh13, c->dh, h13, N, F);
    ct_trace_end(span);
    const float *dn = norm_grad(c, &dfull, split ? keep->dn2 : NULL);
    // backward of f: the partial input gradients summed over tp
    column_linear_bwd(c, layer, CT_LINEAR_W13, dfull, gw->w13, dh13, act(c, s->norm2, C), w->w13, 2 * F, (float *)dn);
    span = op_span(split ? "rmsnorm.backward_input" : "rmsnorm.backward", layer);
    k->rmsnorm_backward(dres, gw->ffn_norm, dn, s->x_mid, w->ffn_norm, s->rstd2, Nl, C);
    ct_trace_end(span);

    // attention: x_mid = x + g(wo(attention(rope(wqkv(f(norm1(x)))))))
    dy = output_grad(c, dres, split ? keep->dy_att : NULL);
    linear_bwd(c, layer, CT_LINEAR_WO, c->datt, gw->wo, dy, act(c, s->att, NH * HS), w->wo, C);
    k->zero(dqkv, (size_t)(N * QKV) * sizeof(float));
    const float *qkv = ct_kept_as_f32(L, s->qkv, c->w_qkv, N * QKV);
    float *att = (float *)ct_kept_as_f32(L, s->att, c->w_att, N * NH * HS);
    ct_attention_args a = attention_args(c, layer, qkv, att, s->lse);
    float *dq = dqkv, *dk = dqkv + NH * HS, *dv = dqkv + (NH + NKV) * HS;
    span = op_span("attention.backward", layer);
    c->ops->attention.backward(c->ops->attention.ctx, &a, c->datt, dq, dk, dv);
    ct_trace_end(span);
    span = op_span("rope.backward", layer);
    k->rope_backward(dq, c->rope_cos, c->rope_sin, rope_pos(c), rope_pos_ld(c), B, T, NH, HS, QKV);
    k->rope_backward(dk, c->rope_cos, c->rope_sin, rope_pos(c), rope_pos_ld(c), B, T, NKV, HS, QKV);
    ct_trace_end(span);
    dn = norm_grad(c, &dfull, split ? keep->dn1 : NULL);
    column_linear_bwd(c, layer, CT_LINEAR_WQKV, dfull, gw->wqkv, dqkv, act(c, s->norm1, C), w->wqkv, QKV, (float *)dn);
    span = op_span(split ? "rmsnorm.backward_input" : "rmsnorm.backward", layer);
    k->rmsnorm_backward(dres, gw->attn_norm, dn, s->x, w->attn_norm, s->rstd1, Nl, C);
    ct_trace_end(span);
}

void ct_block_backward_weight(const ct_block_ctx *c, int layer, const ct_block_acts *s,
                              const ct_block_wgrad_inputs *kept, ct_block_weights *g) {
    const ct_kernels *k = c->k;
    const ct_model_config *m = c->cfg;
    long Nl = c->N_local, C = m->dim, HS = m->head_dim, NH = m->n_heads, F = m->ffn_hidden, QKV = c->qkv_dim;
    // The same gemms and column passes the combined backward runs, so the gradients are the
    // same bits whichever way a schedule computes them.
    linear_bwd(c, layer, CT_LINEAR_W2, NULL, g->w2, kept->dy_ffn, act(c, s->h, F), NULL, C);
    linear_bwd(c, layer, CT_LINEAR_W13, NULL, g->w13, kept->dh13, act(c, s->norm2, C), NULL, 2 * F);
    int span = op_span("rmsnorm.backward_weight", layer);
    k->rmsnorm_backward(NULL, g->ffn_norm, kept->dn2, s->x_mid, NULL, s->rstd2, Nl, C);
    ct_trace_end(span);
    linear_bwd(c, layer, CT_LINEAR_WO, NULL, g->wo, kept->dy_att, act(c, s->att, NH * HS), NULL, C);
    linear_bwd(c, layer, CT_LINEAR_WQKV, NULL, g->wqkv, kept->dqkv, act(c, s->norm1, C), NULL, QKV);
    span = op_span("rmsnorm.backward_weight", layer);
    k->rmsnorm_backward(NULL, g->attn_norm, kept->dn1, s->x, NULL, s->rstd1, Nl, C);
    ct_trace_end(span);
}
