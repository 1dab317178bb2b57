// The planner's time model (time_model.h): per-stage micro-batch costs from the layer shapes,
// communication from the analytic volumes, the pipeline from the schedule simulator.
#include "plan/time_model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "parallel/pipeline_split.h"
#include "plan/moe.h"
#include "plan/time_internal.h"

const char *ct_plan_dim_name(ct_plan_dim d) {
    static const char *names[] = {"dp_shard", "dp_replicate", "tp", "cp", "pp", "ep"};
    return d >= 0 && d < CT_PLAN_NDIMS ? names[d] : "?";
}

// ------------------------------------------------------------------ rates

// Seconds of a matmul C (M x N) = A (M x K) B (K x N) at `peak` FLOP/s: the profile's matmul
// model for its shape and dtype (hardware.h, ct_hw_matmul_seconds). `peak` names the dtype: the
// 8-bit peak where the device has one (operands 1 byte), else the high precision's (2 bytes under
// bf16, 4 under fp32); outputs are written in the compute dtype.
static double mm_time_grouped(const ct_tm *t, double groups, double M, double N, double K, double peak) {
    bool fp8 = t->f8 && peak == t->mm_peak && t->mm_peak != t->hi_peak;
    double out = t->bf16 ? 2 : 4, in = fp8 ? 1 : out;
    return ct_hw_grouped_matmul_seconds(t->hw, groups, M, N, K, peak * t->share, fp8, in, out, t->mem_bw) +
           t->hw->kernel_launch;
}
static double mm_time(const ct_tm *t, double M, double N, double K, double peak) {
    return mm_time_grouped(t, 1, M, N, K, peak);
}

// Forward, input-gradient and weight-gradient seconds of `groups` linear layers y (M x N) =
// x (M x K) W run as one kernel each way (one launch; a dense layer is one group).
static void linear_grouped(const ct_tm *t, double groups, double M, double N, double K, double peak, double *f,
                           double *i, double *w) {
    *f += mm_time_grouped(t, groups, M, N, K, peak);
    *i += mm_time_grouped(t, groups, M, K, N, peak);  // dx (M x K) = dy (M x N) W^T
    *w += mm_time_grouped(t, groups, K, N, M, peak);  // dW (K x N) = x^T dy
    // 8-bit: each operand is scaled (amax: one read) and cast (one read, one byte written), in
    // forward x and W, in backward dy twice (e5m2 for dx and dW) -- memory passes at fp32 width.
    // On a gpu under bf16 the operands are bf16: 2 bytes read twice and 1 written (5 a element).
    if (t->f8) {
        double width = t->bf16 && !t->hw->cpu ? 5.0 : 9.0;
        double fwd = groups * (M * K + K * N) * width, bwd = groups * 2.0 * M * N * width;
        *f += fwd / t->mem_bw;
        *i += bwd / (2 * t->mem_bw);
        *w += bwd / (2 * t->mem_bw);
    }
}
static void linear(const ct_tm *t, double M, double N, double K, double peak, double *f, double *i, double *w) {
    linear_grouped(t, 1, M, N, K, peak, f, i, w);
}

static double mem_time(const ct_tm *t, double bytes) { return bytes / t->mem_bw; }

// ------------------------------------------------------------------ one block, one micro-batch

// A routed layer's matmuls on this rank for N tokens: the router (N x E from C, kept at the high
// precision as TorchTitan keeps it), the experts this EP rank holds as grouped matmuls over the
// rows routed to them, and the shared experts as one SwiGLU of S·F. Each of the E experts sees
// N·k·ep / E rows on an EP rank holding E / ep of them (N·k rows in all): the mean load, as
// balanced routing gives it (auxiliary loss or DeepSeek-V3's bias update); a busiest expert's
// excess would stretch the step by the ratio of its rows to the mean, which the planner does not
// model. Returns the FLOPs per token (forward) of these matmuls.
static double routed_ffn(const ct_tm *t, double N, double *f, double *i, double *w) {
    const ct_model_config *l = &t->lm;
    const double C = l->dim, F = l->ffn_hidden, E = l->n_experts, k = l->moe_top_k, S = l->n_shared_experts;
    double rows = N * k * t->ep / E, groups = E / t->ep;
    linear(t, N, E, C, t->hi_peak, f, i, w);                         // router
    linear_grouped(t, groups, rows, 2 * F, C, t->mm_peak, f, i, w);  // experts' w1, w3
    linear_grouped(t, groups, rows, C, F, t->mm_peak, f, i, w);      // experts' w2
    if (S > 0) {
        linear(t, N, 2 * S * F, C, t->mm_peak, f, i, w);  // shared w1, w3
        linear(t, N, C, S * F, t->mm_peak, f, i, w);      // shared w2
    }
    return 2.0 * C * (E + 3 * (k + S) * F);
}

// A block's seconds for one micro-batch of N tokens on this rank (tp-local dims in t->lm): a
// routed block, or a dense one (a dense model's, or a mixture-of-experts model's dense first
// blocks with their own FFN width).
static void block_cost(const ct_tm *t, bool routed, ct_block_cost *b) {
    memset(b, 0, sizeof *b);
    const ct_model_config *l = &t->lm;
    const double N = t->tokens, C = l->dim, HS = l->head_dim, NH = l->n_heads, NKV = l->n_kv_heads;
    const double Nsp = t->sp ? N / t->tp : N;  // rows the elementwise ops see
    // The FFN hidden width a token's SwiGLU passes see: k + S experts' in a routed block.
    const double F = routed ? (l->moe_top_k + l->n_shared_experts) * (double)l->ffn_hidden
                   : l->n_experts > 0 ? l->dense_ffn_hidden : l->ffn_hidden;
    const double pk = t->mm_peak;
    double f = 0, i = 0, w = 0, ffn_flops;
    linear(t, N, (NH + 2 * NKV) * HS, C, pk, &f, &i, &w);  // wqkv
    linear(t, N, C, NH * HS, pk, &f, &i, &w);              // wo
    if (routed) {
        ffn_flops = routed_ffn(t, N, &f, &i, &w);
    } else {
        linear(t, N, 2 * F, C, pk, &f, &i, &w);  // w1, w3
        linear(t, N, C, F, pk, &f, &i, &w);      // w2
        ffn_flops = 2.0 * C * 3 * F;
    }
    b->mm_f = f, b->mm_i = i, b->mm_w = w;
    b->mm_f_qkv = mm_time(t, N, (NH + 2 * NKV) * HS, C, pk);
    b->mm_f_o = mm_time(t, N, C, NH * HS, pk);
    b->mm_f_13 = mm_time(t, N, 2 * F, C, pk);
    b->mm_f_2 = mm_time(t, N, C, F, pk);
    b->mm_w_qkv = mm_time(t, C, (NH + 2 * NKV) * HS, N, pk);
    b->mm_w_13 = mm_time(t, C, 2 * F, N, pk);
    // Attention: QK^T and PV, 2 FLOPs per multiply-add each, over the causal half of the keys
    // (with cp and head-tail balance every rank's queries also see T / 2 keys on average).
    double attn = 4.0 * N * (t->seq_len / 2.0) * NH * HS;
    b->attn_f = attn / (t->attn_peak * t->share * ct_hw_attention_efficiency(t->hw, HS));
    b->attn_b = 2.5 * b->attn_f;  // backward: 5 products to the forward's 2
    // On TorchTitan's stack the kernels' measured rates by pass and by the length each kernel
    // sees (with cp, a rank's queries against one block of T / cp keys at a time).
    double ff, bf;
    if (ct_tm_stack_attention(t, (double)t->seq_len / t->cp, &ff, &bf)) {
        b->attn_f = attn / (t->hi_peak * ff);
        b->attn_b = 2.5 * attn / (t->hi_peak * bf);
    }
    double mm_flops = N * (2.0 * C * ((NH + 2 * NKV) * HS + NH * HS) + ffn_flops);
    b->flops_f = mm_flops + attn;
    b->flops_b = 2.0 * mm_flops + 2.5 * attn;
    // Elementwise passes, bytes at fp32 (each pass reads its inputs and writes its output):
    double norm = 2 * Nsp * C * 4;                   // one RMSNorm
    double rope = 2 * N * (NH + NKV) * HS * 4;       // q and k rotated in place
    double swiglu = 3 * N * F * 4;                   // h1, h3 -> silu(h1) * h3
    double resid = 3 * Nsp * C * 4;                  // x + y
    // A routed block also permutes its tokens' k rows into expert order and combines them back
    // (each a read and a write of N·k·C values).
    double permute = routed ? 2 * 2 * N * l->moe_top_k * C * 4 : 0;
    const double passes = 2 * norm + rope + swiglu + 2 * resid + permute;
    double fwd = passes, bwd = 2.0 * passes;  // gradients of each: ~2x
    // compile.enable: the attention norm computed into the QKV matmul's input, the residual add
    // into ffn_norm, SwiGLU into the w1/w3 output (the passes that disappear). ctitan's fused cpu
    // kernels are fp32 only, so on a cpu profile only fp32 fuses (and the backward is unfused).
    // On a gpu the fusing compiler (torch.compile's Inductor, or a trainer's fused kernels) works
    // in any dtype and on the backward graph too: the same passes go in bf16, the narrowing
    // casts of the fused kernels' outputs (both norms' and SwiGLU's, the inputs of wqkv, w1/w3
    // and w2) are written narrow by their producers, and the backward loses twice the bytes.
    const bool fuse = t->compile && (!t->bf16 || !t->hw->cpu), gpu_fuse = fuse && !t->hw->cpu;
    const double fused = norm + resid + 2 * N * F * 4;
    if (fuse) fwd -= fused;
    if (gpu_fuse) bwd -= 2.0 * fused;
    // bf16: each matmul input narrowed (4 bytes read, 2 written) and the outputs kept for
    // backward stored narrow.
    if (t->bf16) fwd += 6.0 * (N * C * 3 + N * NH * HS + N * F - (gpu_fuse ? 2 * N * C + N * F : 0));
    double recompute = 2 * norm + swiglu;  // either selective policy
    ct_tm_ew_bytes stack;
    if (ct_tm_stack_elementwise(t, N, Nsp, F, &stack)) fwd = stack.fwd + permute, bwd = stack.bwd + 2 * permute, recompute = stack.recompute;
    b->ew_f = mem_time(t, fwd);
    b->ew_b = mem_time(t, bwd);
    b->ew_recompute_ops = mem_time(t, recompute);
    // TorchTitan's per-op policy saves every second matmul's output, so the backward first
    // reruns wk (N x NKV*HS from C), wo (N x C from NH*HS) and w3 (N x F from C), each on its
    // own shape (wk and w3 are parts of ctitan's fused wqkv and w13), with its 8-bit casts.
    double rf = 0, ri = 0, rw = 0;
    linear(t, N, NKV * HS, C, pk, &rf, &ri, &rw);  // wk
    linear(t, N, C, NH * HS, pk, &rf, &ri, &rw);   // wo
    linear(t, N, F, C, pk, &rf, &ri, &rw);         // w3
    b->mm_recompute_ops = rf;
    b->flops_recompute_ops = 2.0 * N * C * (NKV * HS + NH * HS + F);
}

// ------------------------------------------------------------------ stage costs

const ct_block_cost *ct_tm_block(const ct_tm *t, int layer) {
    return t->m->n_experts > 0 && !ct_plan_moe_routed(t->m, layer) ? &t->dense_block : &t->block;
}

static void stage_costs(ct_tm *t, int s, ct_stage_tm *st) {
    memset(st, 0, sizeof *st);
    const ct_model_config *l = &t->lm;
    const double N = t->tokens, C = l->dim, V = l->vocab_size, Nsp = t->sp ? N / t->tp : N;
    for (int layer = t->first[s]; layer < t->first[s + 1]; layer++) {
        const ct_block_cost *b = ct_tm_block(t, layer);
        double rec = 0;
        ct_ac_mode ac = t->ac;
        if (ac == CT_TM_AC_EVERY) ac = (layer + 1) % t->ac_every == 0 ? CT_TM_AC_FULL : CT_TM_AC_NONE;
        if (ac == CT_TM_AC_FULL) rec = b->mm_f + b->attn_f + b->ew_f;
        if (ac == CT_TM_AC_ELEMENTWISE) rec = b->ew_recompute_ops;
        if (ac == CT_TM_AC_OPS) rec = b->ew_recompute_ops + b->mm_recompute_ops;
        st->attn += b->attn_f + b->attn_b + (ac == CT_TM_AC_FULL ? b->attn_f : 0);
        st->ew += b->ew_f + b->ew_b + (ac == CT_TM_AC_FULL ? b->ew_f : ac == CT_TM_AC_NONE ? 0 : b->ew_recompute_ops);
        st->f += b->mm_f + b->attn_f + b->ew_f;
        st->i += b->mm_i + b->attn_b + b->ew_b + rec;
        st->w += b->mm_w;
        st->flops += b->flops_f + b->flops_b + (ac == CT_TM_AC_FULL ? b->flops_f : 0) +
                     (ac == CT_TM_AC_OPS ? b->flops_recompute_ops : 0);
        st->recompute_fwd_comm += ac == CT_TM_AC_FULL;
        st->recompute_wo_comm += ac == CT_TM_AC_OPS;
        st->layers++;
    }
    if (s == 0) {  // embedding: rows gathered (forward), scattered into the gradient (backward)
        st->f += mem_time(t, 2 * N * C * 4);
        st->i += mem_time(t, 3 * N * C * 4);
    }
    if (s == t->n_stages - 1) {  // head: final norm, output projection (kept high precision), loss
        double pk = t->hi_peak, f = 0, i = 0, w = 0;
        bool f8 = t->f8;
        t->f8 = false;
        linear(t, N, V, C, pk, &f, &i, &w);
        t->f8 = f8;
        st->f += f + mem_time(t, 2 * Nsp * C * 4 + 2 * N * V * 4);  // norm; logits written and read
        st->i += i + mem_time(t, 2 * Nsp * C * 4 * 2 + 2 * N * V * 4);
        st->w += w;
        st->flops += 3 * 2.0 * N * V * C;
    }
    st->b = st->i + st->w;
}

// ------------------------------------------------------------------ the step

static ct_status setup(ct_tm *t, const ct_model_config *m, const ct_config *c, int world, const ct_hw_profile *hw) {
    memset(t, 0, sizeof *t);
    t->m = m, t->c = c, t->hw = hw, t->world = world;
    t->tp = c->compute_parallel_degree, t->cp = c->context_extension_degree, t->pp = c->pipeline_degree;
    t->dr = c->data_replicate_degree, t->ds = ct_config_shard_degree(c, world);
    if (t->tp < 1 || t->cp < 1 || t->pp < 1 || t->dr < 1 || t->ds < 1 || t->tp * t->cp * t->pp * t->dr * t->ds != world)
        return ct_set_error("layout pp %d x dp_replicate %d x dp_shard %d x cp %d x tp %d is not %d ranks", t->pp, t->dr,
                            t->ds, t->cp, t->tp, world);
    if (ct_model_config_local(m, t->tp, &t->lm)) return CT_ERR;
    if (ct_plan_moe_ep(m, c, world, &t->ep)) return CT_ERR;
    if (c->seq_len % t->cp) return ct_set_error("training.seq_len %d does not split over cp %d", c->seq_len, t->cp);
    t->sp = c->sequence_parallel && t->tp > 1;
    t->seq_len = c->seq_len;
    int seqs = c->pipeline_microbatch_size > 0 ? c->pipeline_microbatch_size : c->micro_batch_size;
    if (seqs < 1 || c->micro_batch_size % seqs)
        return ct_set_error("pipeline_microbatch_size %d does not divide micro_batch_size %d", seqs, c->micro_batch_size);
    t->n_mb = c->gradient_accumulation_steps * (c->micro_batch_size / seqs);
    t->tokens = (double)seqs * (c->seq_len / t->cp);
    t->vpp = t->pp > 1 ? (c->pipeline_stages_per_rank > 0 ? c->pipeline_stages_per_rank : 1) : 1;
    if (t->pp > 1) {
        if (ct_pp_kind_parse(c->pipeline_schedule, &t->kind)) return CT_ERR;
        if (t->kind == CT_PP_ZBV) t->vpp = 2;
        if (t->kind == CT_PP_GPIPE || t->kind == CT_PP_1F1B || t->kind == CT_PP_ZB_H1) t->vpp = 1;
    }
    t->n_stages = t->pp * t->vpp;
    if (t->n_stages > CT_TM_MAX_STAGES) return ct_set_error("more than %d pipeline stages", CT_TM_MAX_STAGES);
    if (ct_pp_split_layers(m->n_layers, t->n_stages, c->pipeline_layers_per_stage, c->pipeline_split_points, t->first))
        return CT_ERR;
    // Precision: matmuls at fp8 (8-bit linear layers, where the device multiplies fp8), bf16 or
    // fp32; the output projection stays at the high precision (filter_fqns keeps "output").
    t->bf16 = c->mixed_precision == CT_CFG_BF16;
    t->f8 = c->float8 || c->mxfp8;
    t->hi_peak = ct_hw_peak(hw, t->bf16 ? "bf16" : "fp32");
    t->mm_peak = t->f8 ? ct_hw_peak(hw, "fp8") : t->hi_peak;
    // A gpu's flash attention runs in the compute dtype; the cpu attention kernels are fp32.
    t->attn_peak = hw->cpu ? hw->peak_fp32 : t->hi_peak;
    t->compile = c->compile;
    ct_cfg_ac ac = ct_config_ac(c);
    switch (ac.kind) {
    case CT_CFG_KEEP_INPUT: t->ac = CT_TM_AC_FULL; break;
    case CT_CFG_KEEP_OPS: t->ac = CT_TM_AC_OPS; break;
    case CT_CFG_KEEP_ELEMENTWISE: t->ac = CT_TM_AC_ELEMENTWISE; break;
    case CT_CFG_KEEP_EVERY_N: t->ac = CT_TM_AC_EVERY, t->ac_every = ac.every; break;
    case CT_CFG_KEEP_ALL: break;
    }
    // A cpu node shares its cores: threads per rank = cores / ranks (at least 1), and the rank's
    // share of the node's rate is its threads over the cores, divided again when the ranks'
    // threads oversubscribe the cores.
    t->share = 1;
    if (hw->cpu) {
        int cores = hw->devices_per_node, threads = cores / world > 0 ? cores / world : 1;
        double busy = (double)world * threads;
        t->share = (double)threads / cores * (busy > cores ? cores / busy : 1.0);
    }
    t->mem_bw = hw->memory_bandwidth * t->share;
    return CT_OK;
}

static double stage_cost_fn(void *ctx, int rank, const ct_action *a) {
    (void)rank;
    const ct_plan_stage_cost *sc = ctx;
    const ct_plan_stage_cost *s = &sc[a->stage];
    switch (a->kind) {
    case CT_ACT_FORWARD: return s->f;
    case CT_ACT_BACKWARD: return s->b;
    case CT_ACT_BACKWARD_INPUT: return s->i;
    case CT_ACT_BACKWARD_WEIGHT: return s->w;
    case CT_ACT_RECV_F: case CT_ACT_RECV_B: return s->recv;
    default: return 0;
    }
}

ct_status ct_plan_pipeline_run(ct_pp_kind kind, int pp, int vpp, int n_mb, const ct_plan_stage_cost *stage,
                               ct_plan_pipeline *out) {
    memset(out, 0, sizeof *out);
    ct_schedule *lists = ct_xcalloc((size_t)pp, sizeof *lists);
    int n_stages = pp * vpp, *stage_rank = ct_xcalloc((size_t)n_stages, sizeof(int));
    ct_status st = ct_pp_generate(kind, pp, vpp, n_mb, lists);
    if (st == CT_OK) {
        ct_pp_stage_ranks(ct_pp_kind_placement(kind), pp, vpp, stage_rank);
        ct_pp_costs costs = ct_pp_costs_default();
        costs.fn = stage_cost_fn;
        costs.ctx = (void *)stage;
        ct_pp_sim_result r;
        st = ct_pp_simulate(lists, pp, stage_rank, n_stages, n_mb, &costs, &r);
        if (st == CT_OK) {
            out->makespan = r.makespan;
            out->bubble_frac = r.bubble;
            double best = -1;
            for (int k = 0; k < pp; k++) {
                double busy = 0, recv = 0;
                for (int j = 0; j < lists[k].count; j++) {
                    ct_action_kind a = lists[k].actions[j].kind;
                    double d = r.end[k][j] - r.start[k][j];
                    if (a == CT_ACT_RECV_F || a == CT_ACT_RECV_B) recv += d;
                    else if (a == CT_ACT_FORWARD || a == CT_ACT_BACKWARD || a == CT_ACT_BACKWARD_INPUT || a == CT_ACT_BACKWARD_WEIGHT) busy += d;
                }
                if (busy + recv > best) best = busy + recv, out->busiest = k, out->busy = busy, out->recv = recv;
            }
        }
        ct_pp_sim_result_free(&r);
        ct_pp_lists_free(lists, pp);
    }
    free(lists);
    free(stage_rank);
    return st;
}

ct_status ct_plan_stack_parse(const char *name, ct_plan_stack *out) {
    if (!strcmp(name, "ctitan")) *out = CT_STACK_CTITAN;
    else if (!strcmp(name, "torchtitan")) *out = CT_STACK_TORCHTITAN;
    else return ct_set_error("--stack: expected ctitan or torchtitan, got '%s'", name);
    return CT_OK;
}

ct_status ct_plan_time_step(const ct_model_config *m, const ct_config *c, int world, const ct_hw_profile *hw,
                            ct_plan_time *out) {
    return ct_plan_time_step_on(m, c, world, hw, CT_STACK_CTITAN, out);
}

ct_plan_comm ct_plan_comm_of(const ct_config *c) {
    return (ct_plan_comm){.fsdp_prefetch = c->enable_async_comm, .async_tp = c->enable_async_comm};
}

ct_status ct_plan_time_step_on(const ct_model_config *m, const ct_config *c, int world, const ct_hw_profile *hw,
                               ct_plan_stack stack, ct_plan_time *out) {
    ct_plan_comm comm = ct_plan_comm_of(c);
    return ct_plan_time_step_with(m, c, world, hw, stack, &comm, out);
}

ct_status ct_plan_time_step_with(const ct_model_config *m, const ct_config *c, int world, const ct_hw_profile *hw,
                                 ct_plan_stack stack, const ct_plan_comm *comm, ct_plan_time *out) {
    memset(out, 0, sizeof *out);
    ct_tm t;
    if (setup(&t, m, c, world, hw)) return CT_ERR;
    t.stack = stack;
    t.comm = *comm;
    block_cost(&t, m->n_experts > 0, &t.block);
    if (m->n_dense_layers > 0) block_cost(&t, false, &t.dense_block);
    ct_stage_tm st[CT_TM_MAX_STAGES];
    ct_plan_stage_cost sc[CT_TM_MAX_STAGES];
    for (int s = 0; s < t.n_stages; s++) {
        stage_costs(&t, s, &st[s]);
        ct_tm_stage_comm(&t, s, &st[s]);  // adds exposed per-micro-batch communication to f / i / w
        sc[s] = (ct_plan_stage_cost){st[s].f + st[s].xf, st[s].b + st[s].xi + st[s].xw, st[s].i + st[s].xi,
                                     st[s].w + st[s].xw, st[s].recv};
    }
    // Which stages the busiest rank runs: every one without a pipeline, else the simulator's.
    int busiest = 0;
    double span;
    if (t.pp > 1) {
        ct_plan_pipeline p;
        if (ct_plan_pipeline_run(t.kind, t.pp, t.vpp, t.n_mb, sc, &p)) return CT_ERR;
        busiest = p.busiest;
        span = p.makespan;
        out->exposed[CT_PLAN_PP] = p.recv;
        out->comm[CT_PLAN_PP] = p.recv;
    } else {
        span = t.n_mb * (sc[0].f + sc[0].b);
    }
    int stage_rank[CT_TM_MAX_STAGES];
    if (t.pp > 1) ct_pp_stage_ranks(ct_pp_kind_placement(t.kind), t.pp, t.vpp, stage_rank);
    else stage_rank[0] = 0;
    double busy = 0, exposed_mb = 0;
    for (int s = 0; s < t.n_stages; s++) {
        if (stage_rank[s] != busiest) continue;
        busy += t.n_mb * (st[s].f + st[s].b);
        out->rank_flops += t.n_mb * st[s].flops;
        out->attention += t.n_mb * st[s].attn;
        out->elementwise += t.n_mb * st[s].ew;
        for (int d = 0; d < CT_PLAN_NDIMS; d++) {
            if (d == CT_PLAN_PP) continue;
            out->comm[d] += t.n_mb * st[s].comm[d];
            out->exposed[d] += t.n_mb * st[s].exposed[d];
            out->bytes[d] += t.n_mb * st[s].bytes[d];
            exposed_mb += t.n_mb * st[s].exposed[d];
        }
    }
    // Once per step on every rank: per-step communication (pipeline FSDP, replicas, tp norms)
    // and the optimizer.
    ct_tm_step_comm(&t, busiest, stage_rank, out);
    double opt = ct_tm_optimizer_time(&t, busiest, stage_rank);
    out->compute = busy + opt;
    out->bytes[CT_PLAN_PP] = ct_tm_pp_bytes(&t);
    double pipe_exposed = t.pp > 1 ? out->exposed[CT_PLAN_PP] : 0;
    out->bubble = fmax(0, span - busy - exposed_mb - pipe_exposed);
    double ex = 0;
    for (int d = 0; d < CT_PLAN_NDIMS; d++) ex += out->exposed[d];
    out->step = out->compute + ex + out->bubble;
    out->n_microbatches = t.n_mb;
    double tokens = (double)c->gradient_accumulation_steps * c->micro_batch_size * c->seq_len * t.dr * t.ds;
    out->model_flops = ct_model_flops_per_token(m, c->seq_len) * tokens;
    out->tokens_per_s_per_device = tokens / out->step / world;
    out->model_flops_per_s = out->model_flops / out->step / world;
    double peak = (t.f8 ? ct_hw_peak(hw, "fp8") : t.hi_peak) * (hw->cpu ? t.share : 1);
    out->mfu = peak > 0 ? out->model_flops_per_s / peak : 0;
    return CT_OK;
}
