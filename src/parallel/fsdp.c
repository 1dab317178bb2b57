#include "parallel/fsdp.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/memory.h"
#include "core/trace.h"

static long group_numel(const ct_fsdp *f, int g) { return f->table->group_offset[g + 1] - f->table->group_offset[g]; }
static int head_group(const ct_fsdp *f) { return f->n_groups - 1; }
static int nshards(const ct_fsdp *f) { return f->shard_group->size; }

// ---- a group's two parts: its dense tensors (part 0, sharded over shard_group) and its routed
// experts' (part 1, sharded over expert_group; empty without expert parallelism).
enum { CT_FSDP_PARTS = 2 };
static ct_group *part_group(const ct_fsdp *f, int p) { return p == 0 ? f->shard_group : f->expert_group; }
static long part_len(const ct_fsdp *f, int g, int p) { return p == 0 ? f->part_at[g] : group_numel(f, g) - f->part_at[g]; }
static long part_shard(const ct_fsdp *f, int g, int p) {
    return p == 0 ? f->shard0[g] : f->shard_numel[g] - f->shard0[g];
}
static long part_shard_at(const ct_fsdp *f, int g, int p) { return p == 0 ? 0 : f->shard0[g]; }  // in the shard
static long part_whole_at(const ct_fsdp *f, int g, int p) {  // in the gathered group
    return p == 0 ? 0 : f->shard0[g] * nshards(f);
}
static bool has_part(const ct_fsdp *f, int g, int p) { return part_shard(f, g, p) > 0; }
// Elements of group g gathered whole: each part padded to a multiple of its group's size.
static long whole_numel(const ct_fsdp *f, int g) {
    return part_whole_at(f, g, 1) + (f->expert_group ? part_shard(f, g, 1) * f->expert_group->size : 0);
}

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
        // (a routed experts' tensor is sliced over ep, and held whole by every tp rank)
        if ((p->tp_dim < 0 || p->expert) && t->tp_size > 1) d.replicated_over |= CT_DIM_BIT(CT_DIM_TP);
        if (f->replicate_group && f->replicate_group->size > 1) d.replicated_over |= CT_DIM_BIT(CT_DIM_DP_REPLICATE);
        d.stage = f->group_stage[g];
        long rel = p->offset - t->group_offset[g];
        int part = rel >= f->part_at[g];
        long n = part_shard(f, g, part), lo = (long)part_group(f, part)->rank * n, pos = 0;
        if (!ct_shard_desc_intersect(&d, rel - (part ? f->part_at[g] : 0), lo, lo + n, &pos)) continue;
        st->shards[st->count++] =
            (ct_param_shard){.param = p, .desc = d, .offset = f->shard_offset[g] + part_shard_at(f, g, part) + pos};
    }
}

static size_t bytes16(long n) { return (size_t)n * sizeof(uint16_t); }

// What the buffers below add per rank, as allocated.
static void update_buffer_bytes(ct_fsdp *f) {
    size_t floats = (size_t)f->n_slots * (size_t)f->slot_numel +
                    (size_t)(f->n_full + f->n_pin_grads) * (size_t)f->max_group_numel +
                    (size_t)f->n_lanes * (size_t)f->max_shard_numel;
    f->buffer_bytes = floats * sizeof(float);
    if (f->has16) f->buffer_bytes += bytes16(f->max_shard_numel + f->max_group_numel);
    if (f->param_dtype == CT_BF16) f->buffer_bytes += (size_t)f->n_slots * bytes16(f->max_group_numel);
    f->buffer_bytes += (size_t)f->n_own16 * bytes16(f->max_shard_numel);
    for (int l = 1; l < f->n_lanes; l++)
        if (f->lanes[l].own16) f->buffer_bytes += bytes16(f->max_group_numel + f->max_shard_numel);
    if (f->has_replica16) f->buffer_bytes += bytes16(f->local_numel);
}

static void *grow_array(void *p, int n, size_t size) {
    void *q = realloc(p, (size_t)n * size);
    if (!q) ct_fatal("fsdp", "out of memory for %d buffers", n);
    return q;
}

// A slot's buffers: the fp32 views' (slot_numel floats) and, under bf16, the gathered copy.
static void alloc_slot(ct_fsdp *f, int s) {
    f->slot[s] = ct_mem_take(f->sizing, f->dev, CT_MEM_PARAMS, (size_t)f->slot_numel * sizeof(float));
    f->slot16[s] = f->param_dtype == CT_BF16 ? ct_mem_take(f->sizing, f->dev, CT_MEM_PARAMS, bytes16(f->max_group_numel))
                                             : NULL;
}
static void free_slot(ct_fsdp *f, int s) {
    ct_mem_free(f->slot[s]);
    ct_mem_free(f->slot16[s]);
}
// The fp32 buffer again during set-up, when the sizing counted it (slots are planned in fp32
// first: no bf16 copy yet).
static void give_back_slot(ct_fsdp *f, int s) {
    ct_mem_give_back(f->sizing, f->slot[s], CT_MEM_PARAMS, (size_t)f->slot_numel * sizeof(float));
}

// Set-up (or a schedule's plan): n gather slots, each one padded group.
static void grow_slots(ct_fsdp *f, int n) {
    if (n <= f->n_slots) return;
    f->slot = grow_array(f->slot, n, sizeof(float *));
    f->slot16 = grow_array(f->slot16, n, sizeof(uint16_t *));
    f->slot_group = grow_array(f->slot_group, n, sizeof(int));
    f->gather_h = grow_array(f->gather_h, n, CT_FSDP_PARTS * sizeof(ct_comm_handle));
    f->gather_open = grow_array(f->gather_open, n, sizeof(bool));
    f->prefetched = grow_array(f->prefetched, n, sizeof(bool));
    f->send16 = grow_array(f->send16, n, sizeof(uint16_t *));
    for (int s = f->n_slots; s < n; s++) {
        alloc_slot(f, s);
        f->slot_group[s] = -1;
        memset(&f->gather_h[CT_FSDP_PARTS * s], 0, CT_FSDP_PARTS * sizeof f->gather_h[0]);
        f->gather_open[s] = f->prefetched[s] = false;
        f->send16[s] = NULL;
    }
    f->n_slots = n;
}

// Gather slots besides those UNSHARD holds: two (one group in use, one kept for its backward),
// three with prefetch (the next group arriving), one per group under `never`.
static int base_slots(const ct_fsdp *f) { return f->policy == CT_RESHARD_NEVER ? f->n_groups : f->async ? 3 : 2; }

// Brings the communication buffers in line with the settings (idempotent; after init, precision,
// async and reserve): the narrowed shard each bf16 gather sends (async, each slot its own;
// blocking, every slot shares shard16), and the reduce-scatter lanes with their whole-gradient
// buffers.
static void plan_buffers(ct_fsdp *f) {
    int N = nshards(f);
    bool own16 = f->async && f->param_dtype == CT_BF16 && N > 1;
    for (int s = f->n_own16; s < f->n_slots; s++)
        f->send16[s] = own16 ? ct_mem_take(f->sizing, f->dev, CT_MEM_COMM, bytes16(f->max_shard_numel)) : f->shard16;
    if (own16) f->n_own16 = f->n_slots;
    if (N > 1) {
        int want = f->async ? 2 : 1;
        if (want > f->n_full) {
            f->full = grow_array(f->full, want, sizeof(float *));
            for (int b = f->n_full; b < want; b++)
                f->full[b] = b == 0 ? f->full_grad
                                    : ct_mem_take(f->sizing, f->dev, CT_MEM_GRADS, (size_t)f->max_group_numel * sizeof(float));
            f->n_full = want;
        }
        if (want > f->n_lanes) {
            f->lanes = grow_array(f->lanes, want, sizeof(ct_fsdp_rs));
            for (int l = f->n_lanes; l < want; l++) {
                memset(&f->lanes[l], 0, sizeof f->lanes[l]);
                f->lanes[l].group = -1;
                if (l > 0) f->lanes[l].out = ct_mem_take(f->sizing, f->dev, CT_MEM_COMM, (size_t)f->max_shard_numel * sizeof(float));
            }
            f->n_lanes = want;
        }
        // Lane 0 shares the blocking path's buffers; the others own theirs.
        f->lanes[0].out = f->rs_out;
        f->lanes[0].send16 = f->comm16;
        f->lanes[0].recv16 = f->shard16;
        for (int l = 1; l < f->n_lanes && f->reduce_dtype == CT_BF16; l++)
            if (!f->lanes[l].own16) {
                f->lanes[l].send16 = ct_mem_take(f->sizing, f->dev, CT_MEM_COMM, bytes16(f->max_group_numel));
                f->lanes[l].recv16 = ct_mem_take(f->sizing, f->dev, CT_MEM_COMM, bytes16(f->max_shard_numel));
                f->lanes[l].own16 = true;
            }
    }
    update_buffer_bytes(f);
}

void ct_fsdp_init(ct_fsdp *f, const ct_kernels *k, const ct_param_table *t, ct_group *shard_group,
                  ct_group *replicate_group, ct_reshard_policy policy, ct_model_weights *weights,
                  ct_model_weights *grad_views) {
    ct_fsdp_init_placed(f, k, t, shard_group, NULL, replicate_group, policy, weights, grad_views, NULL, NULL);
}

// Where group g's routed experts start in it (its size when it has none), checking that they
// are the group's last tensors.
static long expert_part_at(const ct_param_table *t, int g) {
    long at = t->group_offset[g + 1] - t->group_offset[g];
    for (int i = t->group_first[g + 1] - 1; i >= t->group_first[g] && t->params[i].expert; i--)
        at = t->params[i].offset - t->group_offset[g];
    for (int i = t->group_first[g]; i < t->group_first[g + 1]; i++)
        if (t->params[i].expert && t->params[i].offset - t->group_offset[g] < at)
            ct_fatal("fsdp", "%s: a group's routed experts must be its last tensors", t->params[i].name);
    return at;
}

static void init_placed(ct_fsdp *f, const ct_kernels *k, const ct_param_table *t, ct_group *shard_group,
                        ct_group *expert_group, ct_group *replicate_group, ct_reshard_policy policy,
                        ct_model_weights *weights, ct_model_weights *grad_views, const bool *owned,
                        const int *group_stage, ct_mem_sizing *sizing) {
    memset(f, 0, sizeof *f);
    f->sizing = sizing;
    f->k = k;
    f->dev = ct_kernels_device(k);
    f->table = t;
    f->param_dtype = f->reduce_dtype = CT_F32;
    f->shard_group = shard_group;
    f->expert_group = expert_group && t->ep_size > 1 ? expert_group : NULL;
    if (f->expert_group && (expert_group->size * t->ep_size != shard_group->size))
        ct_fatal("fsdp", "expert shard group of %d ranks x ep %d is not the shard group's %d", expert_group->size,
                 t->ep_size, shard_group->size);
    f->replicate_group = replicate_group;
    f->policy = policy;
    f->n_groups = t->n_groups;
    f->weights = weights;
    f->grad_views = grad_views;
    f->shard_numel = ct_xcalloc((size_t)f->n_groups, sizeof(long));
    f->shard_offset = ct_xcalloc((size_t)f->n_groups, sizeof(long));
    f->part_at = ct_xcalloc((size_t)f->n_groups, sizeof(long));
    f->shard0 = ct_xcalloc((size_t)f->n_groups, sizeof(long));
    f->whole_at = ct_xcalloc((size_t)(t->count > 0 ? t->count : 1), sizeof(long));
    f->group_slot = ct_xcalloc((size_t)f->n_groups, sizeof(int));
    f->pinned = ct_xcalloc((size_t)f->n_groups, sizeof(bool));
    f->owned = ct_xcalloc((size_t)f->n_groups, sizeof(bool));
    f->pin_grad_of = ct_xcalloc((size_t)f->n_groups, sizeof(float *));
    f->group_stage = ct_xcalloc((size_t)f->n_groups, sizeof(int));
    for (int g = 0; g < f->n_groups; g++) {
        f->owned[g] = owned ? owned[g] : true;
        f->group_stage[g] = group_stage ? group_stage[g] : 0;
    }
    int N = nshards(f), NE = f->expert_group ? f->expert_group->size : 1;
    long max_shard = 0, max_whole = 0;
    for (int g = 0; g < f->n_groups; g++) {
        // Another stage's group: nothing here. Without an expert group, one part: the whole group.
        f->part_at[g] = f->expert_group ? expert_part_at(t, g) : group_numel(f, g);
        long s0 = f->owned[g] ? (f->part_at[g] + N - 1) / N : 0;
        long s1 = f->owned[g] ? (group_numel(f, g) - f->part_at[g] + NE - 1) / NE : 0;
        f->shard0[g] = s0;
        f->shard_numel[g] = s0 + s1;
        f->shard_offset[g] = f->local_numel;
        f->local_numel += s0 + s1;
        if (s0 + s1 > max_shard) max_shard = s0 + s1;
        if (whole_numel(f, g) > max_whole) max_whole = whole_numel(f, g);
        f->group_slot[g] = -1;
        for (int i = t->group_first[g]; i < t->group_first[g + 1]; i++) {
            long rel = t->params[i].offset - t->group_offset[g];
            f->whole_at[i] = rel < f->part_at[g] ? rel : part_whole_at(f, g, 1) + rel - f->part_at[g];
        }
    }
    f->max_group_numel = f->slot_numel = max_whole;
    f->max_shard_numel = max_shard;
    f->params = ct_mem_take(f->sizing, f->dev, CT_MEM_PARAMS, (size_t)f->local_numel * sizeof(float));
    f->grads = ct_mem_take(f->sizing, f->dev, CT_MEM_GRADS, (size_t)f->local_numel * sizeof(float));
    if (!sizing) {  // device memory is not zeroed, and the padding between shards must read zero
        k->zero(f->params, (size_t)f->local_numel * sizeof(float));
        k->zero(f->grads, (size_t)f->local_numel * sizeof(float));
    }
    build_store(f);
    if (N == 1) {
        // One shard is the whole group: the views point at it for good.
        for (int g = 0; g < f->n_groups && !sizing; g++) {
            if (!f->owned[g]) continue;
            ct_model_weights_point_group(weights, t, g, f->params + f->shard_offset[g], NULL);
            ct_model_weights_point_group(grad_views, t, g, f->grads + f->shard_offset[g], NULL);
        }
        return;
    }
    // The slots come with the precision and async settings (or at the first gather), so that they
    // are taken once at their final size: under bf16 smaller in fp32, with a bf16 copy beside.
    f->via_slots = true;
    f->full_grad = ct_mem_take(f->sizing, f->dev, CT_MEM_GRADS, (size_t)f->max_group_numel * sizeof(float));
    f->rs_out = ct_mem_take(f->sizing, f->dev, CT_MEM_COMM, (size_t)max_shard * sizeof(float));
    plan_buffers(f);
}

void ct_fsdp_init_placed(ct_fsdp *f, const ct_kernels *k, const ct_param_table *t, ct_group *shard_group,
                         ct_group *expert_group, ct_group *replicate_group, ct_reshard_policy policy,
                         ct_model_weights *weights, ct_model_weights *grad_views, const bool *owned,
                         const int *group_stage) {
    init_placed(f, k, t, shard_group, expert_group, replicate_group, policy, weights, grad_views, owned, group_stage,
                NULL);
}

void ct_fsdp_init_sizing(ct_fsdp *f, const ct_kernels *k, const ct_param_table *t, ct_group *shard_group,
                         ct_group *expert_group, ct_group *replicate_group, ct_reshard_policy policy,
                         const bool *owned, const int *group_stage, ct_mem_sizing *sizing) {
    init_placed(f, k, t, shard_group, expert_group, replicate_group, policy, NULL, NULL, owned, group_stage, sizing);
}

// Under bf16: where each tensor read in fp32 lies in its fp32 slot (its group's such tensors one
// after another, in order), and the slots' size. Tensors read in bf16 (ct_param.read_bf16) have
// none, except the blocks' under widen_linears.
static void plan_f32_layout(ct_fsdp *f, bool widen_linears) {
    const ct_param_table *t = f->table;
    f->f32_at = ct_xcalloc((size_t)(t->count > 0 ? t->count : 1), sizeof(long));
    f->slot_numel = 0;
    for (int g = 0; g < t->n_groups; g++) {
        long at = 0;
        for (int i = t->group_first[g]; i < t->group_first[g + 1]; i++) {
            const ct_param *q = &t->params[i];
            bool widen = !q->read_bf16 || (widen_linears && g > 0 && g < t->n_groups - 1);
            f->f32_at[i] = widen ? at : -1;
            if (widen) at += t->params[i].numel;
        }
        if (f->owned[g] && at > f->slot_numel) f->slot_numel = at;
    }
}

void ct_fsdp_set_precision(ct_fsdp *f, ct_dtype param, ct_dtype reduce, bool widen_linears) {
    if ((param != CT_F32 && param != CT_BF16) || (reduce != CT_F32 && reduce != CT_BF16))
        ct_fatal("fsdp", "precision %s / %s: expected f32 or bf16", ct_dtype_name(param), ct_dtype_name(reduce));
    if (param == CT_BF16 && f->param_dtype != CT_BF16) {
        // The slots hold the gathered bf16 group, and fp32 only what is read in fp32.
        for (int s = 0; s < f->n_slots; s++) give_back_slot(f, s);
        f->param_dtype = param;
        plan_f32_layout(f, widen_linears);
        for (int s = 0; s < f->n_slots; s++) alloc_slot(f, s);
    }
    f->param_dtype = param;
    f->reduce_dtype = reduce;
    bool narrow = param == CT_BF16 || (reduce == CT_BF16 && nshards(f) > 1);
    if (narrow && !f->has16) {
        f->shard16 = ct_mem_take(f->sizing, f->dev, CT_MEM_COMM, (size_t)f->max_shard_numel * sizeof(uint16_t));
        f->comm16 = ct_mem_take(f->sizing, f->dev, CT_MEM_COMM, (size_t)f->max_group_numel * sizeof(uint16_t));
        f->has16 = true;
    }
    if (reduce == CT_BF16 && f->replicate_group && f->replicate_group->size > 1 && !f->has_replica16) {
        f->replica16 = ct_mem_take(f->sizing, f->dev, CT_MEM_COMM, (size_t)f->local_numel * sizeof(uint16_t));
        f->has_replica16 = true;
    }
    // N = 1 under bf16: one shard is the whole group, but the model must compute with its bf16
    // copy, so it is gathered into slots as N > 1 does instead of read in place.
    if (param == CT_BF16) f->via_slots = true;
    if (f->via_slots) grow_slots(f, base_slots(f));
    plan_buffers(f);
}

void ct_fsdp_set_async(ct_fsdp *f, bool on) {
    f->async = on;
    if (f->via_slots) grow_slots(f, base_slots(f));
    plan_buffers(f);
}

void ct_fsdp_free(ct_fsdp *f) {
    ct_mem_free(f->params);
    ct_mem_free(f->grads);
    for (int s = 0; s < f->n_slots; s++) free_slot(f, s);
    for (int s = 0; s < f->n_own16; s++) ct_mem_free(f->send16[s]);
    free(f->slot);
    free(f->slot16);
    free(f->f32_at);
    free(f->slot_group);
    free(f->gather_h);
    free(f->gather_open);
    free(f->prefetched);
    free(f->send16);
    for (int b = 1; b < f->n_full; b++) ct_mem_free(f->full[b]);
    free(f->full);
    for (int l = 1; l < f->n_lanes; l++) {
        ct_mem_free(f->lanes[l].out);
        ct_mem_free(f->lanes[l].send16);
        ct_mem_free(f->lanes[l].recv16);
    }
    free(f->lanes);
    ct_mem_free(f->full_grad);
    ct_mem_free(f->rs_out);
    ct_mem_free(f->shard16);
    ct_mem_free(f->comm16);
    ct_mem_free(f->replica16);
    free(f->shard_numel);
    free(f->shard_offset);
    free(f->part_at);
    free(f->shard0);
    free(f->whole_at);
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

void ct_fsdp_init_params(ct_fsdp *f, uint64_t seed) { ct_param_store_init_values(&f->store, f->k, seed); }

// ------------------------------------------------------------------ gather / release

// Under async, every operation in flight is tested at each acquire and release: MPI moves a
// non-blocking collective only inside MPI calls (see comm/comm.h on progress), and these are the
// points the model passes between layers. Testing changes no decision (completion is acted on
// where the blocking path would wait), so the ranks stay in step whatever the timing.
static void poll(ct_fsdp *f) {
    if (!f->async) return;
    for (int s = 0; s < f->n_slots; s++)
        for (int p = 0; p < CT_FSDP_PARTS && f->gather_open[s]; p++) ct_comm_test(&f->gather_h[CT_FSDP_PARTS * s + p]);
    for (int i = 0; i < f->rs_count; i++)
        for (int p = 0; p < CT_FSDP_PARTS; p++) ct_comm_test(&f->lanes[(f->rs_first + i) % f->n_lanes].h[p]);
}

// Under bf16, once slot s holds group g's bf16 copy: the tensors read in fp32, widened (exactly).
static void widen_f32(ct_fsdp *f, int g, int s) {
    const ct_param_table *t = f->table;
    for (int i = t->group_first[g]; i < t->group_first[g + 1]; i++)
        if (f->f32_at[i] >= 0)
            f->k->bf16_to_f32(f->slot[s] + f->f32_at[i], f->slot16[s] + f->whole_at[i], t->params[i].numel);
}

// Starts gathering group g into slot s: the fp32 shard, or its bf16 compute copy (narrowed now;
// what is read in fp32 widened when the gather finishes). The views point at the slot from here
// on; the model reads them only after acquire has finished the gather.
static void gather_start(ct_fsdp *f, int g, int s) {
    long n = f->shard_numel[g];
    ct_comm_handle *h = &f->gather_h[CT_FSDP_PARTS * s];
    if (f->param_dtype == CT_BF16) {
        // The bf16 compute copy: narrow this shard, gather half the bytes.
        if (nshards(f) > 1) {
            f->k->f32_to_bf16(f->send16[s], f->params + f->shard_offset[g], n);
            for (int p = 0; p < CT_FSDP_PARTS; p++)
                if (has_part(f, g, p))
                    h[p] = ct_comm_all_gather_start(part_group(f, p), f->send16[s] + part_shard_at(f, g, p),
                                                    f->slot16[s] + part_whole_at(f, g, p), (size_t)part_shard(f, g, p),
                                                    CT_BF16);
            f->gather_open[s] = true;
        } else {
            f->k->f32_to_bf16(f->slot16[s], f->params + f->shard_offset[g], n);
            widen_f32(f, g, s);
        }
    } else {
        for (int p = 0; p < CT_FSDP_PARTS; p++)
            if (has_part(f, g, p))
                h[p] = ct_comm_all_gather_start(part_group(f, p), f->params + f->shard_offset[g] + part_shard_at(f, g, p),
                                                f->slot[s] + part_whole_at(f, g, p), (size_t)part_shard(f, g, p), CT_F32);
        f->gather_open[s] = true;
    }
    f->slot_group[s] = g;
    f->group_slot[g] = s;
    f->prefetched[s] = false;
    if (f->param_dtype == CT_BF16)
        ct_model_weights_point_group_bf16(f->weights, f->table, g, f->slot[s], f->f32_at, f->slot16[s], f->whole_at);
    else ct_model_weights_point_group(f->weights, f->table, g, f->slot[s], f->whole_at);
}

static void gather_finish(ct_fsdp *f, int s) {
    if (!f->gather_open[s]) return;
    for (int p = 0; p < CT_FSDP_PARTS; p++) ct_comm_wait(&f->gather_h[CT_FSDP_PARTS * s + p]);
    if (f->param_dtype == CT_BF16) widen_f32(f, f->slot_group[s], s);
    f->gather_open[s] = false;
}

static void release_group(ct_fsdp *f, int g) {
    int s = f->group_slot[g];
    if (s < 0) return;
    gather_finish(f, s);  // a slot is reused only once nothing is arriving in it
    f->slot_group[s] = -1;
    f->group_slot[g] = -1;
    f->prefetched[s] = false;
}

// A free slot for group g; when every slot is busy, one holding a group gathered ahead that the
// schedule has not asked for is taken back (only under async; the guess was wrong).
static int take_slot(ct_fsdp *f, int g) {
    if (f->n_slots == 0) {  // neither precision nor async was set: the default slots now
        grow_slots(f, base_slots(f));
        plan_buffers(f);
    }
    for (int s = 0; s < f->n_slots; s++)
        if (f->slot_group[s] < 0) return s;
    for (int s = 0; s < f->n_slots; s++)
        if (f->prefetched[s] && !f->pinned[f->slot_group[s]]) {
            release_group(f, f->slot_group[s]);
            return s;
        }
    ct_fatal("fsdp", "all %d gather slots busy when gathering group %d", f->n_slots, g);
}

static bool keep_after_forward(const ct_fsdp *f, int g) {
    switch (f->policy) {
    case CT_RESHARD_ALWAYS: return false;
    case CT_RESHARD_NEVER: return g != 0;  // the embedding's backward needs no weights
    default: return g >= head_group(f) - 1;  // last block and head: backward comes right away
    }
}

// Whether h is a group of this rank's stage `stage` that is not whole (nor arriving).
static bool gatherable(const ct_fsdp *f, int h, int stage) {
    return h >= 0 && h < f->n_groups && f->owned[h] && f->group_stage[h] == stage && f->group_slot[h] < 0;
}

// The group the model will ask to gather after g, as far as g's phase tells: forward goes up the
// stage; backward, backward-input and recompute go down (the embedding's backward reads no
// weights); the head in training runs its backward inside its forward, so after it comes the
// highest block that is not whole (under `default` the last block is kept: the one below).
// -1: none, or already whole.
static int next_group(const ct_fsdp *f, int g, ct_phase phase, unsigned use) {
    int stage = f->group_stage[g];
    if (phase == CT_PHASE_FORWARD && g == head_group(f)) {
        if (!(use & CT_USE_GRADS)) return -1;
        for (int h = g - 1; h >= 1 && f->owned[h] && f->group_stage[h] == stage; h--)
            if (f->group_slot[h] < 0) return h;
        return -1;
    }
    int h = phase == CT_PHASE_FORWARD ? g + 1 : g - 1;
    if (phase == CT_PHASE_BACKWARD_WEIGHT || h < 1) return -1;
    return gatherable(f, h, stage) ? h : -1;
}

// Starts gathering group h ahead of its acquire, if a slot is free (never by taking one back).
static void prefetch(ct_fsdp *f, int h) {
    if (h < 0 || f->group_slot[h] >= 0) return;
    for (int s = 0; s < f->n_slots; s++)
        if (f->slot_group[s] < 0) {
            gather_start(f, h, s);
            f->prefetched[s] = true;
            return;
        }
}

// ---- gradient reduce-scatters: a FIFO of lanes, completed oldest first.

static bool rs_reads(const ct_fsdp *f, const float *buf) {
    for (int i = 0; i < f->rs_count; i++)
        if (f->lanes[(f->rs_first + i) % f->n_lanes].src == buf) return true;
    return false;
}

enum { PIN_REDUCING = -2 };  // pin_grad_user: an unshard buffer a reduce-scatter still reads

// Finishes the oldest reduce-scatter and adds this rank's part into its gradient shard
// (micro-batches accumulate there, in the order they were started).
static void rs_complete_oldest(ct_fsdp *f) {
    ct_fsdp_rs *r = &f->lanes[f->rs_first];
    for (int p = 0; p < CT_FSDP_PARTS; p++) ct_comm_wait(&r->h[p]);
    long n = f->shard_numel[r->group];
    if (f->reduce_dtype == CT_BF16) f->k->bf16_to_f32(r->out, r->recv16, n);
    f->k->add_inplace(f->grads + f->shard_offset[r->group], r->out, n);
    for (int b = 0; b < f->n_pin_grads; b++)
        if (f->pin_grads[b] == r->src && f->pin_grad_user[b] == PIN_REDUCING) f->pin_grad_user[b] = -1;
    r->group = -1;
    r->src = NULL;
    f->rs_first = (f->rs_first + 1) % f->n_lanes;
    f->rs_count--;
}

static void rs_drain(ct_fsdp *f) {
    while (f->rs_count) rs_complete_oldest(f);
}

// Sums a group's whole gradient (in `full`) over the shard group into this rank's part, added to
// its gradient shard when complete: at once (blocking), or when a lane or the buffer is needed
// again, at REDUCE_GRADS or at the end of the step (async).
// In bf16 (reduce dtype) the whole gradient is narrowed first and the sum is bf16 arithmetic,
// as NCCL's bf16 reduce-scatter does: half the bytes, each partial sum rounded. The narrowed
// copy is what travels, so `full` is free again at once.
static void rs_start(ct_fsdp *f, int g, const float *full) {
    if (f->rs_count == f->n_lanes) rs_complete_oldest(f);
    ct_fsdp_rs *r = &f->lanes[(f->rs_first + f->rs_count) % f->n_lanes];
    f->rs_count++;
    r->group = g;
    if (f->reduce_dtype == CT_BF16) f->k->f32_to_bf16(r->send16, full, whole_numel(f, g));
    r->src = f->reduce_dtype == CT_BF16 ? NULL : full;
    for (int p = 0; p < CT_FSDP_PARTS; p++) {
        memset(&r->h[p], 0, sizeof r->h[p]);
        if (!has_part(f, g, p)) continue;
        size_t n = (size_t)part_shard(f, g, p);
        long whole = part_whole_at(f, g, p), at = part_shard_at(f, g, p);
        r->h[p] = f->reduce_dtype == CT_BF16
                      ? ct_comm_reduce_scatter_start(part_group(f, p), r->send16 + whole, r->recv16 + at, n, CT_BF16,
                                                     CT_COMM_SUM)
                      : ct_comm_reduce_scatter_start(part_group(f, p), full + whole, r->out + at, n, CT_F32, CT_COMM_SUM);
    }
    if (!f->async) rs_complete_oldest(f);
}

// A whole-gradient buffer no reduce-scatter reads (waiting for the oldest until one is).
static float *take_full(ct_fsdp *f) {
    for (;;) {
        for (int b = 0; b < f->n_full; b++)
            if (!rs_reads(f, f->full[b])) return f->full[b];
        if (!f->rs_count) ct_fatal("fsdp", "no whole-gradient buffer free");
        rs_complete_oldest(f);
    }
}

static void acquire(void *ctx, int g, ct_phase phase, unsigned use) {
    ct_fsdp *f = ctx;
    poll(f);
    if (use & CT_USE_WEIGHTS && f->via_slots) {
        // Profiling: the gather as the model sees it (start, or the wait for one in flight).
        int span = ct_trace_begin2(CT_TRACE_FSDP, "fsdp.all_gather", "group", g, NULL, 0);
        if (f->group_slot[g] < 0) gather_start(f, g, take_slot(f, g));
        int s = f->group_slot[g];
        // The next group starts arriving before this one is waited for.
        if (f->async) prefetch(f, next_group(f, g, phase, use));
        gather_finish(f, s);
        f->prefetched[s] = false;
        ct_trace_end(span);
    }
    if (use & CT_USE_GRADS && nshards(f) > 1) {
        // An unsharded group sums every micro-batch's gradient in its own buffer until reshard;
        // otherwise each use sums into a whole-gradient buffer, reduce-scattered on release.
        float *full = f->pin_grad_of[g];
        if (!full) {
            full = f->grad_cur = take_full(f);
            f->k->zero(full, (size_t)whole_numel(f, g) * sizeof(float));
        }
        ct_model_weights_point_group(f->grad_views, f->table, g, full, f->whole_at);
    }
}

static void release(void *ctx, int g, ct_phase phase, unsigned use) {
    ct_fsdp *f = ctx;
    if (!f->via_slots) return;
    if (use & CT_USE_GRADS && nshards(f) > 1 && !f->pin_grad_of[g]) {
        int span = ct_trace_begin2(CT_TRACE_FSDP, "fsdp.reduce_scatter", "group", g, NULL, 0);
        rs_start(f, g, f->grad_cur);
        ct_trace_end(span);
    }
    // A group stays whole after forward only when its backward will need it soon (the policy);
    // the head's backward runs inside its forward, so nothing is left for it to wait for.
    // A recompute (activation checkpointing) runs right before the group's backward: keep it.
    bool keep = (phase == CT_PHASE_FORWARD && keep_after_forward(f, g) && g != head_group(f)) ||
                phase == CT_PHASE_RECOMPUTE;
    if (use & CT_USE_WEIGHTS && !keep && !f->pinned[g]) release_group(f, g);
    poll(f);
}

// UNSHARD / RESHARD from the schedule: the group is gathered once and stays whole, and its
// gradient accumulates unsharded over every micro-batch, to be reduce-scattered once at
// reshard -- one all-gather and one reduce-scatter per group and step, for the memory of the
// whole group's parameters and gradient while it is held. Under async the gather is only
// started here (the group's first acquire waits for it) and the reduce-scatter at reshard
// completes later.
static void unshard(void *ctx, int g) {
    ct_fsdp *f = ctx;
    if (!f->via_slots || f->pinned[g]) return;
    if (f->group_slot[g] < 0) gather_start(f, g, take_slot(f, g));
    if (!f->async) gather_finish(f, f->group_slot[g]);
    f->pinned[g] = true;
    if (nshards(f) == 1) return;  // gradients accumulate in the local shard anyway
    for (;;) {
        int b = 0;
        while (b < f->n_pin_grads && f->pin_grad_user[b] != -1) b++;
        if (b < f->n_pin_grads) {
            f->pin_grad_user[b] = g;
            f->pin_grad_of[g] = f->pin_grads[b];
            f->k->zero(f->pin_grads[b], (size_t)whole_numel(f, g) * sizeof(float));
            return;
        }
        if (!f->rs_count) ct_fatal("fsdp", "no gradient buffer left for unsharded group %d", g);
        rs_complete_oldest(f);  // a reshard's reduce-scatter may still read one
    }
}

static void reshard(void *ctx, int g) {
    ct_fsdp *f = ctx;
    float *buf = f->pin_grad_of[g];
    if (buf) {
        rs_start(f, g, buf);
        for (int b = 0; b < f->n_pin_grads; b++)
            if (f->pin_grad_user[b] == g) f->pin_grad_user[b] = rs_reads(f, buf) ? PIN_REDUCING : -1;
        f->pin_grad_of[g] = NULL;
    }
    f->pinned[g] = false;
    release_group(f, g);
}

// Room for n groups held by unshard (gather slots beside those acquire/release use in turn, and
// as many whole-gradient buffers), allocated when a schedule is planned.
static void reserve(void *ctx, int n) {
    ct_fsdp *f = ctx;
    if (!f->via_slots) return;
    int extra = f->async ? 3 : 2;
    int want = n + extra < f->n_groups ? n + extra : f->n_groups;
    if (want > f->n_slots) grow_slots(f, want);
    if (nshards(f) > 1 && n > f->n_pin_grads) {
        float **bufs = realloc(f->pin_grads, (size_t)n * sizeof(float *));
        int *users = realloc(f->pin_grad_user, (size_t)n * sizeof(int));
        if (!bufs || !users) ct_fatal("fsdp", "out of memory for %d gradient buffers", n);
        f->pin_grads = bufs;
        f->pin_grad_user = users;
        for (int b = f->n_pin_grads; b < n; b++) {
            f->pin_grads[b] = ct_mem_take(f->sizing, f->dev, CT_MEM_GRADS, (size_t)f->max_group_numel * sizeof(float));
            f->pin_grad_user[b] = -1;
        }
        f->n_pin_grads = n;
    }
    plan_buffers(f);
}

// End of a step (or of a forward-only pass): groups kept whole for a backward that will not
// come, any still unsharded (their gradients reduce-scattered first), gathers started ahead for
// a use that did not come, and every reduce-scatter still in flight.
static void finish(void *ctx) {
    ct_fsdp *f = ctx;
    for (int g = 0; g < f->n_groups; g++) {
        if (f->pinned[g]) reshard(ctx, g);
        release_group(f, g);
    }
    rs_drain(f);
}

ct_weight_ops ct_fsdp_weight_ops(ct_fsdp *f) {
    ct_weight_ops ops = {.ctx = f, .acquire = acquire, .release = release, .unshard = unshard,
                         .reshard = reshard, .reserve = reserve, .finish = finish};
    return ops;
}

// ------------------------------------------------------------------ step-level

void ct_fsdp_reduce_replicas(void *ctx) {
    ct_fsdp *f = ctx;
    rs_drain(f);  // the shards are final only once every reduce-scatter has landed
    if (!f->replicate_group || f->replicate_group->size == 1) return;
    int span = ct_trace_begin(CT_TRACE_FSDP, "fsdp.reduce_replicas");
    if (f->reduce_dtype == CT_BF16) {
        f->k->f32_to_bf16(f->replica16, f->grads, f->local_numel);
        ct_comm_all_reduce(f->replicate_group, f->replica16, f->replica16, (size_t)f->local_numel, CT_BF16,
                           CT_COMM_SUM);
        f->k->bf16_to_f32(f->grads, f->replica16, f->local_numel);
    } else {
        ct_comm_all_reduce(f->replicate_group, f->grads, f->grads, (size_t)f->local_numel, CT_F32, CT_COMM_SUM);
    }
    ct_trace_end(span);
}

void ct_fsdp_gather_full(ct_fsdp *f, float *full) {
    const ct_param_table *t = f->table;
    float *buf = ct_xmalloc((size_t)f->max_group_numel * sizeof(float));  // (N · shard) one padded group
    for (int g = 0; g < f->n_groups; g++) {
        if (!f->owned[g]) continue;  // another pipeline stage's: left as it is
        for (int p = 0; p < CT_FSDP_PARTS; p++) {
            if (!has_part(f, g, p)) continue;
            ct_comm_all_gather(part_group(f, p), f->params + f->shard_offset[g] + part_shard_at(f, g, p),
                               buf + part_whole_at(f, g, p), (size_t)part_shard(f, g, p), CT_F32);
            f->k->copy_to_host(full + t->group_offset[g] + (p ? f->part_at[g] : 0), buf + part_whole_at(f, g, p),
                               (size_t)part_len(f, g, p) * sizeof(float));
        }
    }
    free(buf);
}

double ct_fsdp_expected_elements(const ct_fsdp *f) {
    if (nshards(f) == 1) return 0;
    double total = 0;
    for (int g = 0; g < f->n_groups; g++) {
        if (!f->owned[g]) continue;
        int gathers = 1;  // forward
        if (g != 0 && g != head_group(f) && !keep_after_forward(f, g)) gathers++;  // again for backward
        for (int p = 0; p < CT_FSDP_PARTS; p++) {
            int N = p == 0 ? nshards(f) : f->expert_group ? f->expert_group->size : 1;
            total += (gathers + 1.0) * (double)part_len(f, g, p) * (N - 1) / N;  // + reduce-scatter
        }
    }
    return total;
}
