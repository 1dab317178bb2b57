// Internal to the time model (time_model.c, time_comm.c): the run as the model sees it, and the
// seconds of one block and one stage for one micro-batch.
#ifndef CT_PLAN_TIME_INTERNAL_H
#define CT_PLAN_TIME_INTERNAL_H
#include <stdbool.h>

#include "plan/time_model.h"

enum { CT_TM_MAX_STAGES = 256 };
// Checkpointing as the time model sees it (model/checkpointing.h defines what each keeps):
// ELEMENTWISE recomputes the norms and SwiGLU; OPS (TorchTitan's per-op policy) those and every
// second matmul (wk, wo, w3); FULL the whole forward; EVERY full on every N-th block.
typedef enum { CT_TM_AC_NONE = 0, CT_TM_AC_ELEMENTWISE, CT_TM_AC_OPS, CT_TM_AC_FULL, CT_TM_AC_EVERY } ct_ac_mode;

typedef struct {
    double mm_f, mm_i, mm_w;   // matmul seconds: forward, input gradients, weight gradients
    double mm_w_qkv, mm_w_13;  // of mm_w, wqkv's and w1/w3's weight gradients: under async tp the
                               // reduction of each one's input gradient runs behind them
    double mm_f_qkv, mm_f_o, mm_f_13, mm_f_2;  // of mm_f, each linear's forward: under TorchTitan's
                               // async tp each one's all-gather or reduce-scatter runs behind it
    double attn_f, attn_b;     // attention kernels
    double ew_f, ew_b;         // elementwise passes
    double ew_recompute_ops;   // the elementwise passes both selective policies recompute
    double mm_recompute_ops;   // the forward matmuls TorchTitan's per-op policy recomputes: wk, wo, w3
    double flops_recompute_ops;  // their FLOPs
    double flops_f, flops_b;   // executed FLOPs (causal attention)
} ct_block_cost;

typedef struct {
    double f, i, w, b;             // compute seconds of one micro-batch (b = i + w; recompute in i)
    double xf, xi, xw;             // exposed per-micro-batch communication added to each action
    double recv;                   // a receive of this stage's input or gradient (pipeline)
    double comm[CT_PLAN_NDIMS];    // per micro-batch: communication seconds
    double exposed[CT_PLAN_NDIMS]; //                  of which exposed
    double bytes[CT_PLAN_NDIMS];   //                  bytes (comm layer's counting)
    double flops;                  // executed FLOPs of one micro-batch
    double attn, ew;               // of f + b: attention kernels, elementwise passes (recompute too)
    int layers, recompute_fwd_comm;  // blocks; blocks fully recomputed (their forward comm again)
    int recompute_wo_comm;         // blocks under the per-op policy (wo's tp reduction again)
} ct_stage_tm;

typedef struct {
    const ct_model_config *m;
    const ct_config *c;
    const ct_hw_profile *hw;
    ct_plan_stack stack;
    ct_plan_comm comm;            // overlap per dimension, fp8 gathers
    ct_model_config lm;           // tp-local dims
    int world, tp, cp, pp, dr, ds, vpp, n_stages, n_mb, seq_len, ac_every;
    int ep;                       // expert parallel degree (plan/moe.h), 1 for a dense model
    ct_pp_kind kind;
    int first[CT_TM_MAX_STAGES + 1];  // stage s: blocks [first[s], first[s+1])
    bool sp, bf16, f8, compile;
    ct_ac_mode ac;
    double tokens;                // tokens per micro-batch on one rank (seqs x T / cp)
    double share;                 // this rank's share of a device (cpu: of the node)
    double mm_peak, hi_peak, attn_peak, mem_bw;
    ct_block_cost block;          // every block's, or a mixture-of-experts model's routed blocks'
    ct_block_cost dense_block;    // a mixture-of-experts model's dense first blocks'
} ct_tm;

// The cost of block `layer`: t->block, or t->dense_block for a dense first block.
const ct_block_cost *ct_tm_block(const ct_tm *t, int layer);

// stack.c: attention's forward and backward fractions of the bf16 peak on the run's stack at
// this kernel sequence length; false where the hardware profile's figure stands.
bool ct_tm_stack_attention(const ct_tm *t, double seq, double *fwd_frac, double *bwd_frac);

// stack.c: the elementwise bytes of one block and micro-batch (N tokens, Nsp rows under sequence
// parallel, F the SwiGLU width a token passes: k + S experts' in a routed block) on the run's
// stack; false where ctitan's own kernel counts (time_model.c) stand.
typedef struct {
    double fwd, bwd, recompute;  // forward, backward, what selective checkpointing reruns
} ct_tm_ew_bytes;
bool ct_tm_stack_elementwise(const ct_tm *t, double N, double Nsp, double F, ct_tm_ew_bytes *out);

// time_comm.c
void ct_tm_stage_comm(const ct_tm *t, int s, ct_stage_tm *st);
void ct_tm_step_comm(const ct_tm *t, int busiest, const int *stage_rank, ct_plan_time *out);
double ct_tm_optimizer_time(const ct_tm *t, int busiest, const int *stage_rank);
double ct_tm_pp_bytes(const ct_tm *t);
#endif
