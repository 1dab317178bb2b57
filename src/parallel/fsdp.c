#include "parallel/fsdp.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/memory.h"

static long group_numel(const ct_fsdp *f, int g) { return f->table->group_offset[g + 1] - f->table->group_offset[g]; }
static int head_group(const ct_fsdp *f) { return f->n_groups - 1; }
static int nshards(const ct_fsdp *f) { return f->shard_group->size; }

// The store's descriptors: tensor p's tp slice, cut to this rank's shard of its group.
static void build_store(ct_fsdp *f) {
    const ct_param_table *t = f->table;
    ct_param_store *st = &f->store;
    st->params = f->params;
    st->grads = f->grads;
    st->numel = f->local_numel;
    st->shards = ct_xcalloc((size_t)t->count, sizeof(ct_param_shard));
    for (int i = 0; i < t->count; i++) {
        const ct_param *p = &t->params[i];
        int g = p->group;
        if (!f->owned[g]) continue;
        ct_shard_desc d = ct_shard_desc_make(p->global_shape[0], p->global_shape[1], p->tp_dim, p->tp_start,
                                             p->tp_dim >= 0 ? p->shape[p->tp_dim] : 0);
        if (p->tp_dim < 0 && t->tp_size > 1) d.replicated_over |= CT_DIM_BIT(CT_DIM_TP);
        if (f->replicate_group && f->replicate_group->size > 1) d.replicated_over |= CT_DIM_BIT(CT_DIM_DP_REPLICATE);
        d.stage = f->group_stage[g];
        long lo = (long)f->shard_group->rank * f->shard_numel[g], pos = 0;
        if (!ct_shard_desc_intersect(&d, p->offset - t->group_offset[g], lo, lo + f->shard_numel[g], &pos)) continue;
        st->shards[st->count++] = (ct_param_shard){.param = p, .desc = d, .offset = f->shard_offset[g] + pos};
    }
}

static void update_buffer_bytes(ct_fsdp *f) {
    f->buffer_bytes = ((size_t)(f->n_slots + 1 + f->n_pin_grads) * (size_t)f->max_group_numel +
                       (size_t)f->max_shard_numel) * sizeof(float);
    if (f->shard16) f->buffer_bytes += (size_t)(f->max_shard_numel + f->max_group_numel) * sizeof(uint16_t);
    if (f->replica16) f->buffer_bytes += (size_t)f->local_numel * sizeof(uint16_t);
}

// Set-up (or a schedule's plan): n gather slots, each one padded group.
static void grow_slots(ct_fsdp *f, int n) {
    if (n <= f->n_slots) return;
    float **slot = realloc(f->slot, (size_t)n * sizeof(float *));
    int *slot_group = realloc(f->slot_group, (size_t)n * sizeof(int));
    if (!slot || !slot_group) ct_fatal("fsdp", "out of memory for %d gather slots", n);
    f->slot = slot;
    f->slot_group = slot_group;
    for (int s = f->n_slots; s < n; s++) {
        f->slot[s] = ct_mem_alloc(CT_MEM_PARAMS, (size_t)f->max_group_numel * sizeof(float));
        f->slot_group[s] = -1;
    }
    f->n_slots = n;
}

void ct_fsdp_init(ct_fsdp *f, const ct_kernels *k, const ct_param_table *t, ct_group *shard_group,
                  ct_group *replicate_group, ct_reshard_policy policy, ct_llama_weights *weights,
                  ct_llama_weights *grad_views) {
    ct_fsdp_init_placed(f, k, t, shard_group, replicate_group, policy, weights, grad_views, NULL, NULL);
}

void ct_fsdp_init_placed(ct_fsdp *f, const ct_kernels *k, const ct_param_table *t, ct_group *shard_group,
                         ct_group *replicate_group, ct_reshard_policy policy, ct_llama_weights *weights,
                         ct_llama_weights *grad_views, const bool *owned, const int *group_stage) {
    memset(f, 0, sizeof *f);
    f->k = k;
    f->table = t;
    f->param_dtype = f->reduce_dtype = CT_F32;
    f->shard_group = shard_group;
    f->replicate_group = replicate_group;
    f->policy = policy;
    f->n_groups = t->n_groups;
    f->weights = weights;
    f->grad_views = grad_views;
    f->shard_numel = ct_xcalloc((size_t)f->n_groups, sizeof(long));
    f->shard_offset = ct_xcalloc((size_t)f->n_groups, sizeof(long));
    f->group_slot = ct_xcalloc((size_t)f->n_groups, sizeof(int));
    f->pinned = ct_xcalloc((size_t)f->n_groups, sizeof(bool));
    f->owned = ct_xcalloc((size_t)f->n_groups, sizeof(bool));
    f->pin_grad_of = ct_xcalloc((size_t)f->n_groups, sizeof(float *));
    f->group_stage = ct_xcalloc((size_t)f->n_groups, sizeof(int));
    for (int g = 0; g < f->n_groups; g++) {
        f->owned[g] = owned ? owned[g] : true;
        f->group_stage[g] = group_stage ? group_stage[g] : 0;
    }
    int N = nshards(f);
    long max_shard = 0;
    for (int g = 0; g < f->n_groups; g++) {
        long shard = f->owned[g] ? (group_numel(f, g) + N - 1) / N : 0;  // another stage's: nothing here
        f->shard_numel[g] = shard;
        f->shard_offset[g] = f->local_numel;
        f->local_numel += shard;
        if (shard > max_shard) max_shard = shard;
        f->group_slot[g] = -1;
    }
    f->max_group_numel = max_shard * N;
    f->max_shard_numel = max_shard;
    f->params = ct_mem_alloc(CT_MEM_PARAMS, (size_t)f->local_numel * sizeof(float));
    f->grads = ct_mem_alloc(CT_MEM_GRADS, (size_t)f->local_numel * sizeof(float));
    build_store(f);
    if (N == 1) {
        // One shard is the whole group: the views point at it for good.
        for (int g = 0; g < f->n_groups; g++) {
            if (!f->owned[g]) continue;
            ct_llama_weights_point_group(weights, t, g, f->params + f->shard_offset[g]);
            ct_llama_weights_point_group(grad_views, t, g, f->grads + f->shard_offset[g]);
        }
        return;
    }
    f->via_slots = true;
    // Two slots suffice when groups are freed after use; `never` keeps every group whole.
    grow_slots(f, policy == CT_RESHARD_NEVER ? f->n_groups : 2);
    f->full_grad = ct_mem_alloc(CT_MEM_GRADS, (size_t)f->max_group_numel * sizeof(float));
    f->rs_out = ct_mem_alloc(CT_MEM_COMM, (size_t)max_shard * sizeof(float));
    update_buffer_bytes(f);
}

void ct_fsdp_set_precision(ct_fsdp *f, ct_dtype param, ct_dtype reduce) {
    if ((param != CT_F32 && param != CT_BF16) || (reduce != CT_F32 && reduce != CT_BF16))
        ct_fatal("fsdp", "precision %s / %s: expected f32 or bf16", ct_dtype_name(param), ct_dtype_name(reduce));
    f->param_dtype = param;
    f->reduce_dtype = reduce;
    bool narrow = param == CT_BF16 || (reduce == CT_BF16 && nshards(f) > 1);
    if (narrow && !f->shard16) {
        f->shard16 = ct_mem_alloc(CT_MEM_COMM, (size_t)f->max_shard_numel * sizeof(uint16_t));
        f->comm16 = ct_mem_alloc(CT_MEM_COMM, (size_t)f->max_group_numel * sizeof(uint16_t));
    }
    if (reduce == CT_BF16 && f->replicate_group && f->replicate_group->size > 1 && !f->replica16)
        f->replica16 = ct_mem_alloc(CT_MEM_COMM, (size_t)f->local_numel * sizeof(uint16_t));
    if (param == CT_BF16 && !f->via_slots) {
        // One shard is the whole group, but the model must compute with its bf16 copy: gather
        // (narrow and widen) into slots as N > 1 does, instead of reading the shard in place.
        f->via_slots = true;
        grow_slots(f, f->policy == CT_RESHARD_NEVER ? f->n_groups : 2);
    }
    update_buffer_bytes(f);
}

void ct_fsdp_free(ct_fsdp *f) {
    ct_mem_free(f->params);
    ct_mem_free(f->grads);
    for (int s = 0; s < f->n_slots; s++) ct_mem_free(f->slot[s]);
    free(f->slot);
    free(f->slot_group);
    ct_mem_free(f->full_grad);
    ct_mem_free(f->rs_out);
    ct_mem_free(f->shard16);
    ct_mem_free(f->comm16);
    ct_mem_free(f->replica16);
    free(f->shard_numel);
    free(f->shard_offset);
    free(f->group_slot);
    free(f->pinned);
    free(f->owned);
    free(f->pin_grad_of);
    for (int b = 0; b < f->n_pin_grads; b++) ct_mem_free(f->pin_grads[b]);
    free(f->pin_grads);
    free(f->pin_grad_user);
    free(f->group_stage);
    ct_param_store_free(&f->store);
    memset(f, 0, sizeof *f);
}

void ct_fsdp_init_params(ct_fsdp *f, uint64_t seed) { ct_param_store_init_values(&f->store, seed); }

// ------------------------------------------------------------------ gather / release

static void gather(ct_fsdp *f, int g) {
    if (f->group_slot[g] >= 0) return;  // still whole from forward
    int s = 0;
    while (s < f->n_slots && f->slot_group[s] >= 0) s++;
    if (s == f->n_slots) ct_fatal("fsdp", "all %d gather slots busy when gathering group %d", f->n_slots, g);
    long n = f->shard_numel[g];
    if (f->param_dtype == CT_BF16) {
        // The bf16 compute copy: narrow this shard, gather half the bytes, widen (exactly).
        f->k->f32_to_bf16(f->shard16, f->params + f->shard_offset[g], n);
        const uint16_t *whole = f->shard16;
        if (nshards(f) > 1) {
            ct_comm_all_gather(f->shard_group, f->shard16, f->comm16, (size_t)n, CT_BF16);
            whole = f->comm16;
        }
        f->k->bf16_to_f32(f->slot[s], whole, n * nshards(f));
    } else {
        ct_comm_all_gather(f->shard_group, f->params + f->shard_offset[g], f->slot[s], (size_t)n, CT_F32);
    }
    f->slot_group[s] = g;
    f->group_slot[g] = s;
    ct_llama_weights_point_group(f->weights, f->table, g, f->slot[s]);
}

static void release_group(ct_fsdp *f, int g) {
    int s = f->group_slot[g];
    if (s < 0) return;
    f->slot_group[s] = -1;
    f->group_slot[g] = -1;
}

static bool keep_after_forward(const ct_fsdp *f, int g) {
    switch (f->policy) {
    case CT_RESHARD_ALWAYS: return false;
    case CT_RESHARD_NEVER: return g != 0;  // the embedding's backward needs no weights
    default: return g >= head_group(f) - 1;  // last block and head: backward comes right away
    }
}

// Sums a group's whole gradient (in `full`) over the shard group and adds this rank's part into
// its gradient shard (micro-batches accumulate there).
// In bf16 (reduce dtype) the whole gradient is narrowed first and the sum is bf16 arithmetic,
// as NCCL's bf16 reduce-scatter does: half the bytes, each partial sum rounded.
static void reduce_scatter_into_shard(ct_fsdp *f, int g, const float *full) {
    long n = f->shard_numel[g];
    if (f->reduce_dtype == CT_BF16) {
        f->k->f32_to_bf16(f->comm16, full, n * nshards(f));
        ct_comm_reduce_scatter(f->shard_group, f->comm16, f->shard16, (size_t)n, CT_BF16, CT_COMM_SUM);
        f->k->bf16_to_f32(f->rs_out, f->shard16, n);
    } else {
        ct_comm_reduce_scatter(f->shard_group, full, f->rs_out, (size_t)n, CT_F32, CT_COMM_SUM);
    }
    f->k->add_inplace(f->grads + f->shard_offset[g], f->rs_out, n);
}

static void acquire(void *ctx, int g, ct_phase phase, unsigned use) {
    ct_fsdp *f = ctx;
    if (use & CT_USE_WEIGHTS && f->via_slots) gather(f, g);
    if (use & CT_USE_GRADS && nshards(f) > 1) {
        // An unsharded group sums every micro-batch's gradient in its own buffer until reshard;
        // otherwise each use sums into the shared buffer, reduce-scattered on release.
        float *full = f->pin_grad_of[g];
        if (!full) {
            full = f->full_grad;
            f->k->zero(full, (size_t)(f->shard_numel[g] * nshards(f)) * sizeof(float));
        }
        ct_llama_weights_point_group(f->grad_views, f->table, g, full);
    }
}

static void release(void *ctx, int g, ct_phase phase, unsigned use) {
    ct_fsdp *f = ctx;
    if (!f->via_slots) return;
    if (use & CT_USE_GRADS && nshards(f) > 1 && !f->pin_grad_of[g]) reduce_scatter_into_shard(f, g, f->full_grad);
    // A group stays whole after forward only when its backward will need it soon (the policy);
    // the head's backward runs inside its forward, so nothing is left for it to wait for.
    // A recompute (activation checkpointing) runs right before the group's backward: keep it.
    bool keep = (phase == CT_PHASE_FORWARD && keep_after_forward(f, g) && g != head_group(f)) ||
                phase == CT_PHASE_RECOMPUTE;
    if (use & CT_USE_WEIGHTS && !keep && !f->pinned[g]) release_group(f, g);
}

// UNSHARD / RESHARD from the schedule: the group is gathered once and stays whole, and its
// gradient accumulates unsharded over every micro-batch, to be reduce-scattered once at
// reshard -- one all-gather and one reduce-scatter per group and step, for the memory of the
// whole group's parameters and gradient while it is held.
static void unshard(void *ctx, int g) {
    ct_fsdp *f = ctx;
    if (!f->via_slots || f->pinned[g]) return;
    gather(f, g);
    f->pinned[g] = true;
    if (nshards(f) == 1) return;  // gradients accumulate in the local shard anyway
    int b = 0;
    while (b < f->n_pin_grads && f->pin_grad_user[b] >= 0) b++;
    if (b == f->n_pin_grads) ct_fatal("fsdp", "no gradient buffer left for unsharded group %d", g);
    f->pin_grad_user[b] = g;
    f->pin_grad_of[g] = f->pin_grads[b];
    f->k->zero(f->pin_grads[b], (size_t)(f->shard_numel[g] * nshards(f)) * sizeof(float));
}

static void reshard(void *ctx, int g) {
    ct_fsdp *f = ctx;
    if (f->pin_grad_of[g]) {
        reduce_scatter_into_shard(f, g, f->pin_grad_of[g]);
        for (int b = 0; b < f->n_pin_grads; b++)
            if (f->pin_grad_user[b] == g) f->pin_grad_user[b] = -1;
        f->pin_grad_of[g] = NULL;
    }
    f->pinned[g] = false;
    release_group(f, g);
}

// Room for n groups held by unshard (gather slots beside the two that acquire/release use in
// turn, and as many whole-gradient buffers), allocated when a schedule is planned.
static void reserve(void *ctx, int n) {
    ct_fsdp *f = ctx;
    if (!f->via_slots) return;
    int want = n + 2 < f->n_groups ? n + 2 : f->n_groups;
    if (want > f->n_slots) grow_slots(f, want);
    if (nshards(f) > 1 && n > f->n_pin_grads) {
        float **bufs = realloc(f->pin_grads, (size_t)n * sizeof(float *));
        int *users = realloc(f->pin_grad_user, (size_t)n * sizeof(int));
        if (!bufs || !users) ct_fatal("fsdp", "out of memory for %d gradient buffers", n);
        f->pin_grads = bufs;
        f->pin_grad_user = users;
        for (int b = f->n_pin_grads; b < n; b++) {
            f->pin_grads[b] = ct_mem_alloc(CT_MEM_GRADS, (size_t)f->max_group_numel * sizeof(float));
            f->pin_grad_user[b] = -1;
        }
        f->n_pin_grads = n;
    }
    update_buffer_bytes(f);
}

// End of a step (or of a forward-only pass): groups kept whole for a backward that will not
// come, and any still unsharded (their gradients reduce-scattered first).
static void finish(void *ctx) {
    ct_fsdp *f = ctx;
    for (int g = 0; g < f->n_groups; g++) {
        if (f->pinned[g]) reshard(ctx, g);
        release_group(f, g);
    }
}

ct_weight_ops ct_fsdp_weight_ops(ct_fsdp *f) {
    ct_weight_ops ops = {.ctx = f, .acquire = acquire, .release = release, .unshard = unshard,
                         .reshard = reshard, .reserve = reserve, .finish = finish};
    return ops;
}

// ------------------------------------------------------------------ step-level

void ct_fsdp_reduce_replicas(void *ctx) {
    ct_fsdp *f = ctx;
    if (!f->replicate_group || f->replicate_group->size == 1) return;
    if (f->reduce_dtype == CT_BF16) {
        f->k->f32_to_bf16(f->replica16, f->grads, f->local_numel);
        ct_comm_all_reduce(f->replicate_group, f->replica16, f->replica16, (size_t)f->local_numel, CT_BF16,
                           CT_COMM_SUM);
        f->k->bf16_to_f32(f->grads, f->replica16, f->local_numel);
    } else {
        ct_comm_all_reduce(f->replicate_group, f->grads, f->grads, (size_t)f->local_numel, CT_F32, CT_COMM_SUM);
    }
}

void ct_fsdp_gather_full(ct_fsdp *f, float *full) {
    const ct_param_table *t = f->table;
    float *buf = ct_xmalloc((size_t)f->max_group_numel * sizeof(float));  // (N · shard) one padded group
    for (int g = 0; g < f->n_groups; g++) {
        if (!f->owned[g]) continue;  // another pipeline stage's: left as it is
        ct_comm_all_gather(f->shard_group, f->params + f->shard_offset[g], buf, (size_t)f->shard_numel[g],
                           CT_F32);
        f->k->copy_to_host(full + t->group_offset[g], buf, (size_t)group_numel(f, g) * sizeof(float));
    }
    free(buf);
}

double ct_fsdp_expected_elements(const ct_fsdp *f) {
    int N = nshards(f);
    if (N == 1) return 0;
    double total = 0;
    for (int g = 0; g < f->n_groups; g++) {
        if (!f->owned[g]) continue;
        int gathers = 1;  // forward
        if (g != 0 && g != head_group(f) && !keep_after_forward(f, g)) gathers++;  // again for backward
        total += (gathers + 1.0) * (double)group_numel(f, g);                     // + reduce-scatter
    }
    return total * (N - 1) / N;
}
