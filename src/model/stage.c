#include "model/stage.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/memory.h"
#include "core/trace.h"

// ------------------------------------------------------------------ planning

// Rows of logits the output loss computes at a time, for N = B·T rows (sizes its scratch).
// Rows of logits the fused output projection + loss computes at once: more rows mean fewer passes
// over the output weight (each chunk's matmul packs all of it again: at bench S, 1024 rows take
// a step from ~223 to ~218 ms), so up to 1024 -- but never more than 32 MiB of logits, and never
// fewer than 256 rows (a 128K vocabulary gets 256 rows, 128 MiB, as before).
static long xent_chunk_rows(long N, long V) {
    long rows = (32L << 20) / ((long)sizeof(float) * (V > 0 ? V : 1));
    rows = rows < 256 ? 256 : rows > 1024 ? 1024 : rows;
    return N < rows ? N : rows;
}

static int n_layers(const ct_stage *s) { return s->layer_end - s->layer_begin; }
static int head_group(const ct_stage *s) { return s->cfg.n_layers + 1; }
static bool seq_parallel(const ct_stage *s) { return s->ops.tp.sequence_parallel != 0; }

// Slices are taken 64-byte aligned (16 floats) from a base; a NULL base only measures.
#define TAKE(ptr, n)                            \
    do {                                        \
        ptr = base ? base + used : NULL;        \
        used += ((n) + 15) & ~15L;              \
    } while (0)

// The checkpointing kinds this stage's blocks use (CT_AC_BIT set).
static unsigned ac_kinds(const ct_stage *s) {
    unsigned kinds = 0;
    for (int l = s->layer_begin; l < s->layer_end; l++) kinds |= CT_AC_BIT(ct_ac_layer_kind(&s->ac, l));
    return kinds;
}

// What sizes the family's buffers: the stage's shape, before any buffer exists.
static ct_block_ctx shape_ctx(ct_stage *s) {
    return (ct_block_ctx){.k = s->k, .ops = &s->ops, .lin = &s->lin, .fused = s->fused, .cfg = &s->cfg, .B = s->B,
                          .T = s->T, .N = s->N, .N_local = s->N_local, .work = s->work};
}

static long carve_shared(ct_stage *s, float *base, long scratch) {
    const ct_model_config *m = &s->cfg;
    long N = s->N, Nl = s->N_local, C = m->dim, HS = m->head_dim;
    long used = 0;
    ct_block_ctx c = shape_ctx(s);
    if (n_layers(s)) {
        float *work;
        TAKE(work, s->block->carve_work(&c, ac_kinds(s), s->work, NULL));
        if (base) s->block->carve_work(&c, ac_kinds(s), s->work, work);
    }
    float *lin;
    ct_linear_shape linears[CT_BLOCK_LINEARS];
    int n_linears = n_layers(s) ? s->block->linears(&c, linears) : 0;
    TAKE(lin, ct_linear_scratch_floats(s->k, &s->prec, N, linears, n_linears));
    if (base) ct_linear_ctx_init(&s->lin, s->k, &s->prec, lin, N, linears, n_linears);
    size_t pack_bytes = s->keep_packs ? ct_weight_packs_bytes(s->k, n_layers(s), linears, n_linears) : 0;
    if (pack_bytes) {  // bf16 weights packed once per executor run (model/weight_packs.h)
        float *packs;
        TAKE(packs, (long)((pack_bytes + 3) / 4));
        if (base) {
            ct_weight_packs_init(&s->packs, s->k, s->layer_begin, n_layers(s), linears, n_linears, packs);
            s->lin.packs = &s->packs;
        }
    }
    TAKE(s->dnorm, N * C);
    if (seq_parallel(s)) {
        TAKE(s->tmp_local, Nl * C);
        TAKE(s->tmp_full, N * C);
    }
    TAKE(s->rope_cos, s->rope_len * HS / 2);
    TAKE(s->rope_sin, s->rope_len * HS / 2);
    TAKE(s->scratch, scratch);
    return used;
}

static void *block_record(void *records, size_t size, int i) { return (char *)records + size * (size_t)i; }
static void *acts_of(const ct_stage *s, const ct_act_slot *a, int i) { return block_record(a->blocks, s->block->acts_size, i); }

static long carve_slot(ct_stage *s, ct_act_slot *a, float *base) {
    long N = s->N, Nl = s->N_local, C = s->cfg.dim;
    long used = 0;
    ct_block_ctx c = shape_ctx(s);
    for (int l = 0; l < n_layers(s); l++) {
        ct_ac_kind kind = ct_ac_layer_kind(&s->ac, s->layer_begin + l);
        TAKE(a->x[l], Nl * C);
        float *rest;
        void *acts = block_record(a->blocks, s->block->acts_size, l);
        TAKE(rest, s->block->carve_acts(&c, kind, a->x[l], acts, NULL));
        if (base) s->block->carve_acts(&c, kind, a->x[l], acts, rest);
    }
    TAKE(a->out, Nl * C);
    if (s->has_head) {
        TAKE(a->norm_f, N * C);
        TAKE(a->rstd_f, Nl);
    }
    TAKE(a->grad, Nl * C);
    if (s->split_backward) {
        for (int l = 0; l < n_layers(s); l++) {
            float *keep;
            void *wg = block_record(a->wg, s->block->wgrad_size, l);
            TAKE(keep, s->block->carve_wgrad(&c, wg, NULL));
            if (base) s->block->carve_wgrad(&c, wg, keep);
        }
        if (s->has_embedding && seq_parallel(s)) TAKE(a->dx_embed, N * C);
    }
    return used;
}
#undef TAKE

// The stage's input: the first block's input, or (no blocks) the output buffer itself.
static float *input_buffer(ct_stage *s, ct_act_slot *a) { return n_layers(s) ? a->x[0] : a->out; }

static ct_tensor stream_view(const ct_stage *s, float *data) {
    return ct_tensor_make(data, CT_F32, (ct_device){s->k->device, 0}, s->N_local, s->cfg.dim);
}
ct_tensor ct_stage_input(ct_stage *s, ct_act_slot *a) { return stream_view(s, input_buffer(s, a)); }
ct_tensor ct_stage_output(ct_stage *s, ct_act_slot *a) { return stream_view(s, a->out); }
ct_tensor ct_stage_grad(ct_stage *s, ct_act_slot *a) { return stream_view(s, a->grad); }

int ct_stage_groups(const ct_stage *s, int *groups) {
    int n = 0;
    if (s->has_embedding) groups[n++] = 0;
    for (int l = s->layer_begin; l < s->layer_end; l++) groups[n++] = 1 + l;
    if (s->has_head) groups[n++] = head_group(s);
    return n;
}

void ct_stage_init(ct_stage *s, const ct_stage_spec *spec) {
    memset(s, 0, sizeof *s);
    s->k = spec->k;
    s->ops = spec->ops;
    s->cfg = *spec->cfg;
    s->layer_begin = spec->layer_begin;
    s->layer_end = spec->layer_end;
    s->has_embedding = spec->has_embedding;
    s->has_head = spec->has_head;
    s->w = spec->weights;
    s->g = spec->grads;
    s->prec = spec->prec;
    s->ac = spec->ac;
    s->fused = spec->fused;
    s->sizing = spec->sizing;
    // A weight packed once serves every micro-batch of a step, only where it has more than one
    // and the run asks (the memory is 4 bytes per linear weight element: model/weight_packs.h).
    s->keep_packs = s->prec.compute == CT_BF16 && spec->pack_weights && spec->micro_batches > 1 && n_layers(s) > 0;
    if (s->prec.compute != CT_F32 && s->prec.compute != CT_BF16)
        ct_fatal("stage", "compute dtype %s: expected f32 or bf16", ct_dtype_name(s->prec.compute));
    if (s->ops.tp.size < 1) s->ops.tp.size = 1;
    s->B = spec->B;
    s->T = spec->T;
    s->N = s->B * s->T;
    s->pos = spec->pos;
    s->rope_len = spec->max_pos > s->T ? spec->max_pos : s->T;
    s->N_local = seq_parallel(s) ? s->N / s->ops.tp.size : s->N;
    const ct_model_config *m = &s->cfg;
    long HS = m->head_dim;
    if (!m->family) ct_fatal("stage", "a model config without a family (ct_model_config_from sets it)");
    s->block = m->family->block;
    s->lin.prec = s->prec;  // the carve functions read the compute dtype from it
    s->work = ct_xcalloc(1, s->block->work_size);
    if (m->n_experts > 0 && s->block->expert_counts && !s->sizing)
        s->expert_load = ct_xcalloc((size_t)(n_layers(s) > 0 ? n_layers(s) : 1) * (size_t)m->n_experts, sizeof(int64_t));
    s->xent_chunk_rows = xent_chunk_rows(s->N, m->vocab_size);
    long scratch = n_layers(s) ? s->ops.attention.scratch_floats(s->ops.attention.ctx, s->T, s->T, HS) : 0;
    if (s->has_head) {
        long xent = s->ops.loss.scratch_floats(s->ops.loss.ctx, s->xent_chunk_rows, m->vocab_size, m->dim,
                                               s->prec.compute == CT_BF16);
        if (xent > scratch) scratch = xent;
    }
    long total = carve_shared(s, NULL, scratch);
    s->arena = ct_mem_take(s->sizing, ct_kernels_device(s->k), CT_MEM_ACTIVATIONS, (size_t)total * sizeof(float));
    if (s->sizing) return;  // sizing only: nothing to carve or fill
    carve_shared(s, s->arena, scratch);
    ct_model_rope_tables(s->k, m, s->rope_cos, s->rope_sin, s->rope_len);
}

static void free_slots(ct_stage *s) {
    for (int i = 0; i < s->n_slots; i++) {
        if (s->block->release_acts && s->slot_arena)
            for (int l = 0; l < n_layers(s); l++) s->block->release_acts(acts_of(s, &s->slots[i], l));
        free(s->slots[i].x);
        free(s->slots[i].blocks);
        free(s->slots[i].wg);
    }
    free(s->slots);
    ct_mem_free(s->slot_arena);
    s->slots = NULL;
    s->slot_arena = NULL;
    s->n_slots = 0;
}

void ct_stage_plan_slots(ct_stage *s, int n, bool split) {
    // The weight pass reads the matmul inputs after the input pass has moved on to other blocks,
    // when a checkpointed block's recomputed ones are gone (and recomputing there would
    // communicate): the trainer refuses the combination before planning.
    if (split && (ac_kinds(s) & ~CT_AC_BIT(CT_AC_NONE)))
        ct_fatal("stage", "activation checkpointing with a split backward (I/W actions)");
    free_slots(s);
    s->split_backward = split;
    s->n_slots = n;
    s->slots = ct_xcalloc((size_t)n, sizeof(ct_act_slot));
    long per_slot = 0;
    for (int i = 0; i < n; i++) {
        ct_act_slot *a = &s->slots[i];
        a->mb = -1;
        size_t blocks = (size_t)(n_layers(s) > 0 ? n_layers(s) : 1);
        a->x = ct_xcalloc(blocks, sizeof(float *));
        a->blocks = ct_xcalloc(blocks, s->block->acts_size);
        if (split) a->wg = ct_xcalloc(blocks, s->block->wgrad_size);
        per_slot = carve_slot(s, a, NULL);
    }
    s->slot_arena = ct_mem_take(s->sizing, ct_kernels_device(s->k), CT_MEM_ACTIVATIONS, (size_t)(per_slot * n) * sizeof(float));
    if (s->sizing) return;
    for (int i = 0; i < n; i++) carve_slot(s, &s->slots[i], s->slot_arena + per_slot * i);
}

void ct_stage_weights_fixed(ct_stage *s, bool fixed) {
    if (fixed) ct_weight_packs_open(&s->packs);
    else ct_weight_packs_close(&s->packs);
}

void ct_stage_free(ct_stage *s) {
    ct_weight_packs_free(&s->packs);
    free_slots(s);
    free(s->work);
    free(s->expert_load);
    ct_mem_free(s->arena);
    memset(s, 0, sizeof *s);
}

// ------------------------------------------------------------------ running

static ct_block_ctx block_ctx(ct_stage *s, const ct_act_slot *a) {
    ct_block_ctx c = shape_ctx(s);
    c.pos = s->pos;
    c.docs = a->docs;
    c.rope_pos = a->rope_pos;
    c.rope_cos = s->rope_cos;
    c.rope_sin = s->rope_sin;
    c.tmp_local = s->tmp_local;
    c.tmp_full = s->tmp_full;
    c.scratch = s->scratch;
    c.dnorm = s->dnorm;
    return c;
}

static void *wgrad_of(const ct_stage *s, const ct_act_slot *a, int i) { return block_record(a->wg, s->block->wgrad_size, i); }

// Every piece of the model's work runs between the acquire and the release of its parameter
// group, so that is where a profile's span of it opens and closes ("block.backward", with the
// layer): the weight strategy's gather and reduce-scatter nest inside it.
static int trace_group(const ct_stage *s, int group, ct_phase phase) {
    static const char *const names[3][5] = {
        {"embedding.forward", "embedding.recompute", "embedding.backward", "embedding.backward_input",
         "embedding.backward_weight"},
        {"block.forward", "block.recompute", "block.backward", "block.backward_input", "block.backward_weight"},
        {"head.forward_loss", "head.recompute", "head.backward", "head.backward_input", "head.backward_weight"},
    };
    int kind = group == 0 ? 0 : group == head_group(s) ? 2 : 1;
    const char *name = (unsigned)phase < 5 ? names[kind][phase] : "stage.phase";
    return kind == 1 ? ct_trace_begin2(CT_TRACE_COMPUTE, name, "layer", group - 1, NULL, 0)
                     : ct_trace_begin(CT_TRACE_COMPUTE, name);
}

// Returns the profile span the matching release closes (-1 when not profiling).
static int acquire(ct_stage *s, int group, ct_phase phase, unsigned use) {
    int span = ct_trace_on() ? trace_group(s, group, phase) : -1;
    if (s->ops.weights.acquire) s->ops.weights.acquire(s->ops.weights.ctx, group, phase, use);
    return span;
}
static void release(ct_stage *s, int group, ct_phase phase, unsigned use, int span) {
    if (s->ops.weights.release) s->ops.weights.release(s->ops.weights.ctx, group, phase, use);
    ct_trace_end(span);
}

// The same tp edges the blocks use, for the embedding and the head.
static void gather_rows(ct_stage *s, const float *local, float *full) {
    if (s->ops.tp.gather_rows && seq_parallel(s))
        s->ops.tp.gather_rows(s->ops.tp.ctx, local, full, s->N_local, s->cfg.dim);
}
static void reduce_rows(ct_stage *s, float *full, float *local) {
    if (s->ops.tp.reduce_rows) s->ops.tp.reduce_rows(s->ops.tp.ctx, full, local, s->N_local, s->cfg.dim);
}
static float *norm_out(ct_stage *s, float *full) { return seq_parallel(s) ? s->tmp_local : full; }
static float *partial_out(ct_stage *s, float *local) { return seq_parallel(s) ? s->tmp_full : local; }
static long vocab_start(const ct_stage *s) { return (long)s->ops.tp.rank * s->cfg.vocab_size; }

// The output projection's weight as the loss takes it: its bf16 compute copy under bf16 (FSDP
// gathers the head that way), else fp32.
static const void *head_weight(const ct_stage *s) {
    if (s->prec.compute != CT_BF16) return s->w->output;
    if (!s->w->output16) ct_fatal("stage", "bf16 head without the bf16 copy of its output weight");
    return s->w->output16;
}

static void embedding_forward(ct_stage *s, ct_act_slot *a) {
    const ct_model_config *m = &s->cfg;
    int span = acquire(s, 0, CT_PHASE_FORWARD, CT_USE_WEIGHTS);
    // This rank's vocabulary rows (zeros for other tokens), summed over tp.
    float *x0 = input_buffer(s, a), *e = partial_out(s, x0);
    int op = ct_trace_begin(CT_TRACE_KERNEL, "tok_embeddings.forward");
    if (s->w->tok_embeddings16)
        s->k->embedding_forward_bf16(e, a->inputs, s->w->tok_embeddings16, s->N, m->dim, vocab_start(s), m->vocab_size);
    else
        s->k->embedding_forward(e, a->inputs, s->w->tok_embeddings, s->N, m->dim, vocab_start(s), m->vocab_size);
    ct_trace_end(op);
    reduce_rows(s, e, x0);
    release(s, 0, CT_PHASE_FORWARD, CT_USE_WEIGHTS, span);
}

// Final norm, then the output projection fused with cross-entropy; in training also the head's
// backward, leaving the gradient of the last block's output in a->grad.
static void head_forward(ct_stage *s, ct_act_slot *a, bool training, float grad_scale) {
    const ct_model_config *m = &s->cfg;
    long N = s->N, Nl = s->N_local, C = m->dim;
    unsigned use = CT_USE_WEIGHTS | (training ? CT_USE_GRADS : 0);
    int span = acquire(s, head_group(s), CT_PHASE_FORWARD, use);
    float *nf = norm_out(s, a->norm_f);
    int op = ct_trace_begin(CT_TRACE_KERNEL, "rmsnorm.forward");
    s->k->rmsnorm_forward(nf, a->rstd_f, a->out, s->w->norm, Nl, C, (float)m->norm_eps);
    ct_trace_end(op);
    gather_rows(s, nf, a->norm_f);
    // The output projection is a matmul like the blocks': bf16 inputs (its weight is the bf16
    // compute copy already), fp32 accumulation and loss. It stays out of 8-bit (the filter's
    // "output"), as in TorchTitan.
    if (s->prec.compute == CT_BF16) ct_round_to_bf16(&s->lin, a->norm_f, N * C);
    const ct_loss_ops *L = &s->ops.loss;
    // The output projection and the loss are one kernel, its backward too in training (one span;
    // vocabulary parallel: its reductions inside).
    if (!training) {
        op = ct_trace_begin(CT_TRACE_KERNEL, "output+cross_entropy.forward");
        L->fn(L->ctx, a->loss_sum, NULL, NULL, a->norm_f, head_weight(s), a->targets, N, C, m->vocab_size,
              vocab_start(s), 0.0f, s->xent_chunk_rows, s->prec.compute == CT_BF16, s->scratch);
        ct_trace_end(op);
    } else {
        op = ct_trace_begin(CT_TRACE_KERNEL, "output+cross_entropy.forward_backward");
        L->fn(L->ctx, a->loss_sum, s->dnorm, s->g->output, a->norm_f, head_weight(s), a->targets, N, C,
              m->vocab_size, vocab_start(s), grad_scale, s->xent_chunk_rows, s->prec.compute == CT_BF16, s->scratch);
        ct_trace_end(op);
        float *dn = norm_out(s, s->dnorm);
        reduce_rows(s, s->dnorm, dn);  // dx of the vocabulary-split projection is partial over tp
        s->k->zero(a->grad, (size_t)(Nl * C) * sizeof(float));
        op = ct_trace_begin(CT_TRACE_KERNEL, "rmsnorm.backward");
        s->k->rmsnorm_backward(a->grad, s->g->norm, dn, a->out, s->w->norm, a->rstd_f, Nl, C);
        ct_trace_end(op);
    }
    release(s, head_group(s), CT_PHASE_FORWARD, use, span);
}

void ct_stage_forward(ct_stage *s, ct_act_slot *a, bool training, float grad_scale) {
    ct_block_ctx c = block_ctx(s, a);
    if (training) c.token_weight = grad_scale, c.aux_sum = s->aux_sum;
    if (s->has_embedding) embedding_forward(s, a);
    for (int i = 0; i < n_layers(s); i++) {
        int l = s->layer_begin + i, group = 1 + l;
        int span = acquire(s, group, CT_PHASE_FORWARD, CT_USE_WEIGHTS);
        float *out = i + 1 < n_layers(s) ? a->x[i + 1] : a->out;
        s->block->forward(&c, l, acts_of(s, a, i), &s->w->blocks[l], out);
        release(s, group, CT_PHASE_FORWARD, CT_USE_WEIGHTS, span);
        if (training && s->expert_load)
            s->block->expert_counts(acts_of(s, a, i), s->cfg.n_experts, s->expert_load + (long)i * s->cfg.n_experts);
    }
    if (s->has_head) head_forward(s, a, training, grad_scale);
}

void ct_stage_take_expert_load(ct_stage *s, int64_t *load) {
    if (!s->expert_load) return;
    long E = s->cfg.n_experts, n = (long)n_layers(s) * E;
    for (long i = 0; i < n; i++) load[(long)s->layer_begin * E + i] += s->expert_load[i];
    memset(s->expert_load, 0, (size_t)n * sizeof(int64_t));
}

// A checkpointed block's activations, again, just before its backward: what its kind recomputes
// (model/checkpointing.h), or its whole forward (its output goes to dnorm, free until the
// backward starts). Its own phase, so that data sharding's gather here stays for the backward
// that follows.
static void recompute(ct_stage *s, const ct_block_ctx *c, ct_act_slot *a, int i) {
    int l = s->layer_begin + i, group = 1 + l;
    ct_ac_kind kind = ct_ac_layer_kind(&s->ac, l);
    if (kind == CT_AC_NONE) return;
    int span = acquire(s, group, CT_PHASE_RECOMPUTE, CT_USE_WEIGHTS);
    if (kind == CT_AC_FULL) s->block->forward(c, l, acts_of(s, a, i), &s->w->blocks[l], s->dnorm);
    else s->block->recompute(c, l, kind, acts_of(s, a, i), &s->w->blocks[l]);
    release(s, group, CT_PHASE_RECOMPUTE, CT_USE_WEIGHTS, span);
}

// Blocks in reverse, in `phase` (combined or input-only).
static void blocks_backward(ct_stage *s, ct_act_slot *a, ct_phase phase) {
    ct_block_ctx c = block_ctx(s, a);
    bool split = phase == CT_PHASE_BACKWARD_INPUT;
    unsigned use = CT_USE_WEIGHTS | (split ? 0 : CT_USE_GRADS);
    for (int i = n_layers(s) - 1; i >= 0; i--) {
        int l = s->layer_begin + i, group = 1 + l;
        recompute(s, &c, a, i);
        int span = acquire(s, group, phase, use);
        s->block->backward(&c, l, acts_of(s, a, i), &s->w->blocks[l], split ? NULL : &s->g->blocks[l],
                           split ? wgrad_of(s, a, i) : NULL, a->grad);
        release(s, group, phase, use, span);
    }
}

// The embedding's weight gradient: a scatter of the input gradient on all N rows.
static void embedding_backward(ct_stage *s, const ct_act_slot *a, const float *dx0, ct_phase phase) {
    int span = acquire(s, 0, phase, CT_USE_GRADS);
    int op = ct_trace_begin(CT_TRACE_KERNEL, "tok_embeddings.backward");
    s->k->embedding_backward(s->g->tok_embeddings, dx0, a->inputs, s->N, s->cfg.dim, vocab_start(s),
                             s->cfg.vocab_size);
    ct_trace_end(op);
    release(s, 0, phase, CT_USE_GRADS, span);
}

void ct_stage_backward(ct_stage *s, ct_act_slot *a) {
    blocks_backward(s, a, CT_PHASE_BACKWARD);
    if (s->has_embedding) {
        float *dx0 = partial_out(s, a->grad);
        gather_rows(s, a->grad, dx0);
        embedding_backward(s, a, dx0, CT_PHASE_BACKWARD);
    }
}

void ct_stage_backward_input(ct_stage *s, ct_act_slot *a) {
    if (!s->split_backward) ct_fatal("stage", "backward_input on a stage planned without split backward");
    blocks_backward(s, a, CT_PHASE_BACKWARD_INPUT);
    // The weight pass must not communicate: gather the embedding's rows now.
    if (s->has_embedding && seq_parallel(s)) gather_rows(s, a->grad, a->dx_embed);
}

void ct_stage_backward_weight(ct_stage *s, ct_act_slot *a) {
    if (!s->split_backward) ct_fatal("stage", "backward_weight on a stage planned without split backward");
    ct_block_ctx c = block_ctx(s, a);
    for (int i = n_layers(s) - 1; i >= 0; i--) {
        int l = s->layer_begin + i, group = 1 + l;
        int span = acquire(s, group, CT_PHASE_BACKWARD_WEIGHT, CT_USE_GRADS);
        s->block->backward_weight(&c, l, acts_of(s, a, i), wgrad_of(s, a, i), &s->g->blocks[l]);
        release(s, group, CT_PHASE_BACKWARD_WEIGHT, CT_USE_GRADS, span);
    }
    if (s->has_embedding)
        embedding_backward(s, a, seq_parallel(s) ? a->dx_embed : a->grad, CT_PHASE_BACKWARD_WEIGHT);
}
