// The time model's communication (time_model.h): bytes per collective from the analytic volumes
// the benches hold the comm layer to, seconds over the link the group spans, and what overlap
// hides. Bytes are counted as the comm layer counts them per rank: an all-gather or
// reduce-scatter of a tensor of E bytes over n ranks moves (n-1)/n·E, an all-reduce 2(n-1)/n·E
// (ring algorithms: that many bytes cross each rank's link in each direction, so the seconds
// are those bytes over the collective library's achieved bus bandwidth plus a latency per ring
// step: hardware.h, ct_hw_coll_seconds).
#include <math.h>
#include <string.h>

#include "plan/moe.h"
#include "plan/time_internal.h"

// ------------------------------------------------------------------ links

// The link a group's collectives run over; their seconds are the profile's collective model
// (hardware.h, ct_hw_coll_seconds: NCCL's bus bandwidth by collective plus a latency per step).
typedef struct {
    const ct_hw_profile *hw;
    double bw, lat;  // ring bus bandwidth (cp's ring, pipeline sends), one step's latency
    bool inter;      // across nodes
} link;

// A group lies within a node when it and the dimensions inside it fit there (ranks are laid out
// tp fastest, then cp, dp_shard, dp_replicate, pp). A cpu profile is one node.
static link link_for(const ct_tm *t, int span) {
    const ct_hw_profile *hw = t->hw;
    bool inter = !hw->cpu && span > hw->devices_per_node;
    return (link){hw, ct_hw_busbw(hw, inter, CT_HW_ALL_GATHER), inter ? hw->inter_latency : hw->intra_latency, inter};
}

// All-gather or reduce-scatter of a tensor of `bytes` (whole) over n ranks (both run at the
// ring's bus bandwidth), and all-reduce. Nothing to send is no collective (a dense model's
// experts): no latency either.
static double ag_bytes(int n, double bytes) { return ct_hw_coll_bus_bytes(CT_HW_ALL_GATHER, n, bytes); }
static double ag_time(link l, int n, double bytes) { return ct_hw_coll_seconds(l.hw, CT_HW_ALL_GATHER, n, bytes, l.inter); }
static double ar_bytes(int n, double bytes) { return ct_hw_coll_bus_bytes(CT_HW_ALL_REDUCE, n, bytes); }
static double ar_time(link l, int n, double bytes) { return ct_hw_coll_seconds(l.hw, CT_HW_ALL_REDUCE, n, bytes, l.inter); }

// Parameters (elements) of each FSDP group kind on one tp rank: the model's own counts. Block
// `layer`'s: those sharded over all dp_shard x cp ranks, and the experts this EP rank gathers
// over the dp_shard x cp / ep ranks outside its EP group (plan/moe.h).
static void block_numel(const ct_tm *t, int layer, double *dense, double *experts) {
    ct_plan_moe_block_numel(&t->lm, layer, t->ep, dense, experts);
}
static double embedding_numel(const ct_tm *t) { return (double)ct_model_embedding_params(&t->lm); }
static double head_numel(const ct_tm *t) { return (double)ct_model_head_params(&t->lm); }

static int fsdp_n(const ct_tm *t) { return t->ds * t->cp; }

// Bytes of one gather of block `layer`'s `dense` and `experts` elements at the compute dtype's
// width gb, or, with fp8 gathers under tensorwise float8 (TorchTitan's float8 all-gather: the
// weights are cast to fp8 before the collective, which then sends 1 byte an element), gb for
// what stays out of float8 -- the two norm weights and a routed block's router -- and 1 for the
// matmul weights.
static void gather_bytes(const ct_tm *t, int layer, double dense, double experts, double gb, double *dense_b,
                         double *experts_b) {
    *dense_b = dense * gb, *experts_b = experts * gb;
    if (!t->comm.float8_all_gather || !t->f8 || t->c->mxfp8 || t->c->float8_recipe == CT_CFG_F8_ROWWISE) return;
    double hi = 2.0 * t->lm.dim + (ct_plan_moe_routed(t->m, layer) ? (double)t->lm.dim * t->lm.n_experts : 0);
    if (hi > dense) hi = dense;
    *dense_b = hi * gb + (dense - hi), *experts_b = experts;
}
// Groups of a stage are gathered per step (UNSHARD / RESHARD around the stage) rather than per
// micro-batch: the trainer does this under a pipeline with the default reshard policy.
static bool fsdp_per_step(const ct_tm *t) {
    return t->pp > 1 && fsdp_n(t) > 1 && t->c->fsdp_reshard_after_forward == CT_CFG_RESHARD_DEFAULT;
}

// ------------------------------------------------------------------ per micro-batch

static void add(ct_stage_tm *st, ct_plan_dim d, double bytes, double secs, double exposed) {
    st->bytes[d] += bytes;
    st->comm[d] += secs;
    st->exposed[d] += exposed;
}

static void fsdp_stage(const ct_tm *t, int s, ct_stage_tm *st) {
    int N = fsdp_n(t);
    if (N <= 1 || fsdp_per_step(t)) return;
    link l = link_for(t, t->tp * t->cp * t->ds);
    double gb = t->bf16 ? 2 : 4, rb = t->c->mixed_precision_reduce == CT_CFG_BF16 ? 2 : 4;
    ct_cfg_reshard policy = t->c->fsdp_reshard_after_forward;
    bool async = t->comm.fsdp_prefetch;
    int Ne = N / t->ep;  // the ranks each expert is sharded over
    link le = link_for(t, t->tp * t->cp * t->ds);  // strided by ep: it spans the whole shard group
    for (int layer = t->first[s]; layer < t->first[s + 1]; layer++) {
        const ct_block_cost *b = ct_tm_block(t, layer);
        double blk, ex, blk_f = b->mm_f + b->attn_f + b->ew_f, blk_b = b->mm_i + b->mm_w + b->attn_b + b->ew_b;
        block_numel(t, layer, &blk, &ex);
        double blk_g, ex_g;  // bytes gathered
        gather_bytes(t, layer, blk, ex, gb, &blk_g, &ex_g);
        bool regather =
            policy == CT_CFG_RESHARD_ALWAYS || (policy == CT_CFG_RESHARD_DEFAULT && layer != t->m->n_layers - 1);
        double g = ag_time(l, N, blk_g) + ag_time(le, Ne, ex_g), rs = ag_time(l, N, blk * rb) + ag_time(le, Ne, ex * rb);
        double bytes = (ag_bytes(N, blk_g) + ag_bytes(Ne, ex_g)) * (regather ? 2 : 1) + ag_bytes(N, blk * rb) +
                       ag_bytes(Ne, ex * rb);
        double fwd = g, bwd = (regather ? g : 0) + rs;
        // Async: the next block's gather runs behind this one's compute (forward), the one
        // below's re-gather and this one's reduce-scatter behind the backward.
        double xf = async ? fmax(0, fwd - blk_f) : fwd, xb = async ? fmax(0, bwd - blk_b) : bwd;
        add(st, CT_PLAN_DP_SHARD, bytes, fwd + bwd, xf + xb);
        st->xf += xf, st->xi += xb;
    }
    double ends = (s == 0 ? embedding_numel(t) : 0) + (s == t->n_stages - 1 ? head_numel(t) : 0);
    if (ends > 0) {  // embedding and head: gathered once (their backward needs no re-gather)
        double g = ag_time(l, N, ends * gb), rs = ag_time(l, N, ends * rb);
        add(st, CT_PLAN_DP_SHARD, ag_bytes(N, ends * gb) + ag_bytes(N, ends * rb), g + rs,
            async ? g * 0.5 : g + rs);  // async: the embedding's gather is the step's first wait
        st->xf += async ? g * 0.5 : g;
        st->xi += async ? 0 : rs;
    }
}

// The 8-bit matmuls' amax reductions over tp in one block (model/linear.h), blocking and mostly
// latency: tensorwise one float each -- forward wqkv's and w13's weights, wo's and w2's inputs
// and weights (6), backward those weights again, the output gradients of wqkv and w13 and the
// inputs of wo and w2 (8; 2 more under async, whose split backward casts dout twice); rowwise a
// row of amaxes -- forward wo's and w2's inputs (N) and weights (C), backward wqkv's and w13's
// output gradients (N) and weight columns (C); MXFP8 none (its blocks stay on one rank).
static void f8_amax(const ct_tm *t, link l, int n, double *fwd, double *bwd, double *fb, double *bb) {
    *fwd = *bwd = *fb = *bb = 0;
    if (!t->f8 || t->c->mxfp8) return;
    double N = t->tokens, C = t->lm.dim;
    if (t->c->float8_recipe != CT_CFG_F8_ROWWISE) {
        int nb = t->comm.async_tp ? 10 : 8;
        *fwd = 6 * ar_time(l, n, 4), *fb = 6 * ar_bytes(n, 4);
        *bwd = nb * ar_time(l, n, 4), *bb = nb * ar_bytes(n, 4);
    } else {
        *fwd = *bwd = 2 * (ar_time(l, n, N * 4) + ar_time(l, n, C * 4));
        *fb = *bb = 2 * (ar_bytes(n, N * 4) + ar_bytes(n, C * 4));
    }
}

static void tp_stage(const ct_tm *t, int s, ct_stage_tm *st) {
    int n = t->tp;
    if (n <= 1) return;
    link l = link_for(t, n);
    const ct_block_cost *b = &t->block;
    // (N, C): the residual stream's rows, fp32 in ctitan; TorchTitan's are in the compute dtype.
    double width = t->stack == CT_STACK_TORCHTITAN && t->bf16 ? 2 : 4;
    double E = t->tokens * t->lm.dim * width;
    double one = ar_time(l, n, E), ob = ar_bytes(n, E);
    bool async = t->comm.async_tp;
    double af, ab, afb, abb;  // 8-bit amax reductions of one block: seconds and bytes, fwd / bwd
    f8_amax(t, l, n, &af, &ab, &afb, &abb);
    for (int layer = t->first[s]; layer < t->first[s + 1]; layer++) {
        add(st, CT_PLAN_TP, afb + abb, af + ab, af + ab);
        st->xf += af, st->xi += ab;
        // forward: after wo and w2 (all-reduce; or reduce-scatter + all-gather under sequence
        // parallel: the same bytes); backward: the input gradients of wqkv and w1/w3, which under
        // async overlap those layers' weight-gradient matmuls.
        double xb = async ? fmax(0, one - b->mm_w_qkv) + fmax(0, one - b->mm_w_13) : 2 * one;
        // TorchTitan's async tp (sequence parallel, micro-pipelined collective matmuls) also runs
        // the forward's all-gathers (into wqkv, w1/w3) and reduce-scatters (out of wo, w2), each
        // half an all-reduce's bytes, behind their own matmuls; ctitan's forward waits for them.
        double xf = 2 * one;
        if (async && t->sp && t->stack == CT_STACK_TORCHTITAN)
            xf = fmax(0, one / 2 - b->mm_f_qkv) + fmax(0, one / 2 - b->mm_f_o) + fmax(0, one / 2 - b->mm_f_13) +
                 fmax(0, one / 2 - b->mm_f_2);
        add(st, CT_PLAN_TP, 4 * ob, 4 * one, xf + xb);
        st->xf += xf, st->xi += xb;
    }
    int full = st->recompute_fwd_comm;  // fully recomputed blocks communicate as in forward
    add(st, CT_PLAN_TP, full * (2 * ob + afb), full * (2 * one + af), full * (2 * one + af));
    st->xi += full * (2 * one + af);
    // The per-op policy's recomputed wo ends in its tp reduction, exposed like the forward's.
    int wo = st->recompute_wo_comm;
    add(st, CT_PLAN_TP, wo * ob, wo * one, wo * one);
    st->xi += wo * one;
    if (s == 0) {  // vocabulary-split embedding: one all-reduce of its output
        add(st, CT_PLAN_TP, ob, one, one);
        st->xf += one;
    }
    if (s == t->n_stages - 1) {  // output layer's input gradient; loss statistics: 3 floats per row
        double stats = ar_time(l, n, t->tokens * 4) + ar_time(l, n, 2 * t->tokens * 4);
        add(st, CT_PLAN_TP, ob + ar_bytes(n, 3 * t->tokens * 4), one + stats, one + stats);
        st->xf += stats, st->xi += one;
    }
}

static void cp_stage(const ct_tm *t, int s, ct_stage_tm *st) {
    int P = t->cp;
    if (P <= 1) return;
    link l = link_for(t, t->tp * P);
    const ct_block_cost *b = &t->block;  // attention is alike in every block
    double S = 2.0 * t->tokens * t->lm.n_kv_heads * t->lm.head_dim * 4;  // this rank's K and V
    bool ring = t->c->cp_rotate_method == CT_CFG_CP_RING;
    double fb, bb, ft, bt;  // bytes (the comm layer's count) and seconds, forward and backward
    if (ring) {  // P-1 blocks each way (counted sent + received), backward also dK / dV home
        fb = 2 * (P - 1) * S;
        bb = 2 * (P - 1) * S + 2 * P * S;
        ft = (P - 1) * (S / l.bw + l.lat);
        bt = ((P - 1) * S + P * S) / l.bw + (2 * P - 1) * l.lat;
    } else {
        // K|V gathered in bf16 where the attention runs in bf16: under bf16 on the cpu (the cuda
        // backend has no bf16 attention and gathers fp32); dK|dV reduce-scattered in fp32
        double gather = (P - 1) * S * (t->bf16 && t->hw->cpu ? 0.5 : 1.0);
        fb = gather;
        bb = gather + (P - 1) * S;
        ft = fb / l.bw + (P - 1) * l.lat;
        bt = bb / l.bw + 2 * (P - 1) * l.lat;
    }
    // The ring overlaps each step's transfer with the attention on the block in hand.
    double xf = ring ? fmax(0, ft - b->attn_f) : ft, xb = ring ? fmax(0, bt - b->attn_b) : bt;
    int layers = st->layers, full = st->recompute_fwd_comm;
    add(st, CT_PLAN_CP, (layers + full) * fb + layers * bb, (layers + full) * ft + layers * bt,
        (layers + full) * xf + layers * xb);
    st->xf += layers * xf, st->xi += layers * xb + full * xf;
}

// A routed layer's all-to-alls under expert parallelism: forward the dispatch (each token's k
// rows to the ranks holding their experts) and the combine (the experts' output rows back),
// backward the same two for the gradients -- four exchanges of the rows that leave the rank, at
// the residual stream's width (bf16 activations on TorchTitan's stack under bf16, ctitan's fp32
// otherwise). Peers on other nodes are reached over the inter-node link, the others over the
// node's, both at once: an exchange takes the longer. Blocking: nothing hides them (TorchTitan
// runs them between the router and the experts' matmuls, which wait for the rows).
static void ep_stage(const ct_tm *t, int s, ct_stage_tm *st) {
    if (t->ep <= 1) return;
    const ct_hw_profile *hw = t->hw;
    double width = t->stack == CT_STACK_TORCHTITAN && t->bf16 ? 2 : 4;
    double bytes = ct_plan_moe_a2a_bytes(t->tokens, t->lm.moe_top_k, t->lm.dim, width, t->ep);
    double off = hw->cpu ? 0 : ct_plan_moe_a2a_off_node(t->ep, t->tp, hw->devices_per_node);
    double secs = fmax(bytes * (1 - off) / ct_hw_busbw(hw, false, CT_HW_ALL_TO_ALL) + (t->ep - 1) * hw->intra_latency,
                       off > 0 ? bytes * off / ct_hw_busbw(hw, true, CT_HW_ALL_TO_ALL) + (t->ep - 1) * hw->inter_latency : 0);
    for (int layer = t->first[s]; layer < t->first[s + 1]; layer++) {
        if (!ct_plan_moe_routed(t->m, layer)) continue;
        add(st, CT_PLAN_EP, 4 * bytes, 4 * secs, 4 * secs);
        st->xf += 2 * secs, st->xi += 2 * secs;
    }
}

void ct_tm_stage_comm(const ct_tm *t, int s, ct_stage_tm *st) {
    fsdp_stage(t, s, st);
    ep_stage(t, s, st);
    tp_stage(t, s, st);
    cp_stage(t, s, st);
    if (t->pp > 1) {
        link l = link_for(t, t->world);
        st->recv = l.lat + t->tokens * t->lm.dim * 4 / l.bw;  // (N, C) fp32 activation or gradient
    }
}

// ------------------------------------------------------------------ per step

double ct_tm_pp_bytes(const ct_tm *t) {
    if (t->pp <= 1) return 0;
    int sr[CT_TM_MAX_STAGES];
    ct_pp_stage_ranks(ct_pp_kind_placement(t->kind), t->pp, t->vpp, sr);
    double per_rank[CT_TM_MAX_STAGES] = {0}, act = t->tokens * t->lm.dim * 4, most = 0;
    for (int s = 0; s + 1 < t->n_stages; s++) {
        if (sr[s] == sr[s + 1]) continue;  // ZBV's turn: passed locally
        // forward activation s -> s+1 and the gradient back, each micro-batch: sent and received
        per_rank[sr[s]] += 2 * t->n_mb * act;
        per_rank[sr[s + 1]] += 2 * t->n_mb * act;
    }
    for (int r = 0; r < t->pp; r++) most = fmax(most, per_rank[r]);
    return most;
}

// Elements of the busiest rank's groups on one tp rank: whole (`gathered` false: what its shards
// cover, 1 / (dp_shard x cp) of each), or as gathered under expert parallelism (E / ep experts).
// gather_b (when not NULL): the bytes of gathering them at width gb (gather_bytes).
static double rank_numel_bytes(const ct_tm *t, int busiest, const int *stage_rank, bool gathered, int *groups,
                               double gb, double *gather_b) {
    double numel = 0, bytes = 0;
    *groups = 0;
    for (int s = 0; s < t->n_stages; s++) {
        if (stage_rank[s] != busiest) continue;
        for (int layer = t->first[s]; layer < t->first[s + 1]; layer++) {
            double dense, experts, db, eb;
            block_numel(t, layer, &dense, &experts);
            numel += dense + experts * (gathered ? 1 : t->ep);
            gather_bytes(t, layer, dense, experts * (gathered ? 1 : t->ep), gb, &db, &eb);
            bytes += db + eb;
        }
        *groups += t->first[s + 1] - t->first[s];
        if (s == 0) numel += embedding_numel(t), bytes += embedding_numel(t) * gb, ++*groups;
        if (s == t->n_stages - 1) numel += head_numel(t), bytes += head_numel(t) * gb, ++*groups;
    }
    if (gather_b) *gather_b = bytes;
    return numel;
}
static double rank_numel(const ct_tm *t, int busiest, const int *stage_rank, bool gathered, int *groups) {
    return rank_numel_bytes(t, busiest, stage_rank, gathered, groups, 0, NULL);
}

void ct_tm_step_comm(const ct_tm *t, int busiest, const int *stage_rank, ct_plan_time *out) {
    int groups, N = fsdp_n(t);
    double numel = rank_numel(t, busiest, stage_rank, false, &groups), gathered_b;
    double gathered = rank_numel_bytes(t, busiest, stage_rank, true, &groups, t->bf16 ? 2 : 4, &gathered_b);
    double rb = t->c->mixed_precision_reduce == CT_CFG_BF16 ? 2 : 4;
    if (fsdp_per_step(t)) {  // one gather and one reduce-scatter per group and step
        link l = link_for(t, t->tp * t->cp * t->ds);
        double secs = ag_time(l, N, gathered_b) + ag_time(l, N, gathered * rb);
        secs += 2 * (groups - 1) * (N - 1) * l.lat;  // one collective per group
        out->bytes[CT_PLAN_DP_SHARD] += ag_bytes(N, gathered_b) + ag_bytes(N, gathered * rb);
        out->comm[CT_PLAN_DP_SHARD] += secs;
        // Async: gathers start at UNSHARD and reduce-scatters finish later; the first wait remains.
        out->exposed[CT_PLAN_DP_SHARD] += t->comm.fsdp_prefetch ? secs / fmax(1, groups) : secs;
    }
    if (t->dr > 1) {  // the gradient shards all-reduced over the replicas once per step
        link l = link_for(t, t->tp * t->cp * t->ds * t->dr);
        double E = ceil(numel / N) * rb;
        out->bytes[CT_PLAN_DP_REPLICATE] += ar_bytes(t->dr, E);
        out->comm[CT_PLAN_DP_REPLICATE] += ar_time(l, t->dr, E);
        out->exposed[CT_PLAN_DP_REPLICATE] += ar_time(l, t->dr, E);
    }
    if (t->sp) {  // norm weights' gradients summed over tp: (2 per block + final norm) x C
        link l = link_for(t, t->tp);
        int layers = 0;
        for (int s = 0; s < t->n_stages; s++)
            if (stage_rank[s] == busiest) layers += t->first[s + 1] - t->first[s];
        double E = (2.0 * layers + 1) * t->lm.dim * 4;
        out->bytes[CT_PLAN_TP] += ar_bytes(t->tp, E);
        out->comm[CT_PLAN_TP] += ar_time(l, t->tp, E);
        out->exposed[CT_PLAN_TP] += ar_time(l, t->tp, E);
    }
}

// AdamW over this rank's shard, one pass: parameters, gradient and both moments read, three
// written (28 bytes), the gradient norm (4), zeroing the gradients (4), and under bf16 the
// compute copy narrowed (6): about 40 bytes per element at memory bandwidth.
double ct_tm_optimizer_time(const ct_tm *t, int busiest, const int *stage_rank) {
    int groups;
    double numel = rank_numel(t, busiest, stage_rank, false, &groups) / fsdp_n(t);
    return numel * (t->bf16 ? 42.0 : 36.0) / t->mem_bw + groups * t->hw->kernel_launch;
}
