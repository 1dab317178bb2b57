// The executor across processes (parallel/executor.h): schedules whose actions communicate.
//
// Runs as an MPI test (tests/mpi_test.h): started plainly it re-runs itself under mpirun with 2
// ranks, one OpenMP thread each. Every rank builds the same tiny model (4 layers, dim 32, vocab
// 64) from one seed, moved off its initial values, and the same micro-batches, and computes the
// single-process reference (ct_model_step over the micro-batches, in order) itself. Then:
//
//   (a) pipeline, 2 stages: rank 0 runs stage 0 (embedding + layers [0, 2)), rank 1 stage 1
//       (layers [2, 4) + head), both on views into full copies of the parameters and gradients.
//       GPipe, 1F1B and a split (I then W, SEND_B right after I) order: the loss on rank 1 and
//       each rank's gradients of its own stage equal the reference BIT FOR BIT (same kernels, same
//       order per micro-batch, micro-batches' backward in ascending order as in the reference);
//       the other stage's gradients stay exactly zero. A GPipe order with the backwards reversed
//       changes the order micro-batches accumulate into each gradient: equal within 1e-5.
//       Then four one-layer stages round-robin on the two ranks (Interleaved1F1B): every
//       message of a step between the two ranks has its own tag -- stage 1's activation and
//       gradient of one micro-batch both come from rank 0 -- and the gradients equal the
//       reference bit for bit.
//   (b) tensor parallel 2 (+ sequence parallel, and without it): one stage with the whole local
//       model, the ops filled as the trainer does (ct_tp_apply, FSDP weight ops over a shard
//       group of one, both gradient reducers). "F B F B ..." and "F F F I I I W W W" give the
//       same losses on both ranks and the same gradients, bit for bit; the loss equals the
//       reference within 1e-5 relative, every gradient (gathered into the global layout) within
//       2e-5 of its tensor's largest element (seen: ~1e-6, as tp sums partial products over the
//       ranks in another order); the replicated norms' gradients are the same bits on both ranks.
//   (c) FSDP over 2 ranks, each on its own micro-batches (data parallel), for every reshard
//       policy: both schedules (and all policies) give the same gradient shards bit for bit; each
//       rank's loss equals the reference's over its own micro-batches bit for bit (the gathered
//       weights are the same numbers); the gathered parameters equal the reference's exactly and
//       the gradient shards equal the reference's gradients over all micro-batches of both ranks
//       within 1e-5 of the tensor's largest element (the reduce-scatter sums the two ranks'
//       contributions in another order than the reference accumulates micro-batches).
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "comm/backend.h"
#include "comm/comm.h"
#include "core/memory.h"
#include "core/rng.h"
#include "model/weights.h"
#include "model/runner.h"
#include "model/stage.h"
#include "mpi_test.h"
#include "parallel/executor.h"
#include "parallel/fsdp.h"
#include "parallel/pipeline_schedules.h"
#include "parallel/schedule.h"
#include "parallel/tensor_parallel.h"

enum { B = 2, T = 8, N_TOT = 4 };  // micro-batches (B, T); N_TOT of them in all
#define RIG_B B
#define RIG_T T
#define RIG_MB N_TOT
#include "executor_rig.h"

static ct_group world;
static const ct_kernels *kern;

static long valid_tokens(const ct_microbatch *mbs, int n) {
    long v = 0;
    for (int mb = 0; mb < n; mb++)
        for (long i = 0; i < B * T; i++) v += mbs[mb].targets[i] >= 0;
    return v;
}

// The single-process reference: micro-batches mbs[0..n) in order; gradients into gout (t.total).
static double reference(rig *r, const ct_microbatch *mbs, int n, float grad_scale, float *gout) {
    ct_model_acts a;
    ct_model_acts_init(&a, &r->m, B, T);
    memset(r->grads, 0, r->t.total * sizeof(float));
    double loss = 0;
    for (int mb = 0; mb < n; mb++)
        loss += ct_model_step(&a, &r->w, gout ? &r->g : NULL, mbs[mb].inputs, mbs[mb].targets, grad_scale);
    if (gout) memcpy(gout, r->grads, r->t.total * sizeof(float));
    memset(r->grads, 0, r->t.total * sizeof(float));
    ct_model_acts_free(&a);
    return loss;
}


static long count_nonzero(const float *a, long n) {
    long d = 0;
    for (long i = 0; i < n; i++) d += a[i] != 0.0f;
    return d;
}

// max |a - b| / max |b|
static double rel_err(const float *a, const float *b, long n) {
    double maxb = 1e-30, maxd = 0;
    for (long i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        maxb = fabs(b[i]) > maxb ? fabs(b[i]) : maxb;
        maxd = d > maxd || isnan(d) ? (isnan(d) ? INFINITY : d) : maxd;
    }
    return maxd / maxb;
}

static double sum_squares(const float *a, long n) {
    double s = 0;
    for (long i = 0; i < n; i++) s += (double)a[i] * a[i];
    return s;
}

static void parse_all(ct_schedule *s, const char *const *text, int n) {
    for (int i = 0; i < n; i++)
        CHECK(ct_schedule_parse(&s[i], text[i]) == CT_OK, "parse '%s': %s", text[i], ct_last_error());
}

// ------------------------------------------------------------------ (a) pipeline

static void test_pipeline_two_stages(void) {
    if (world.size != 2) return;
    rig r;
    rig_init(&r, 4, 64, 7);
    const int L = r.m.n_layers, cut = 2, me = world.rank;
    const long P = r.t.total;
    const long valid = valid_tokens(r.mbs, N_TOT);
    const float gs = 1.0f / (float)valid;
    float *gref = ct_xmalloc(P * sizeof(float));
    double lref = reference(&r, r.mbs, N_TOT, gs, gref);

    ct_group pp;
    CHECK(ct_comm_group_split(&world, 0, world.rank, "pp", &pp) == CT_OK, "%s", ct_last_error());
    ct_stage st;
    ct_stage_spec spec = {.k = kern, .cfg = &r.m, .layer_begin = me == 0 ? 0 : cut, .layer_end = me == 0 ? cut : L,
                          .has_embedding = me == 0, .has_head = me == 1, .B = B, .T = T,
                          .ops = ct_stage_ops_local(kern), .weights = &r.w, .grads = &r.g};
    ct_stage_init(&st, &spec);
    ct_stage *stages[2] = {me == 0 ? &st : NULL, me == 1 ? &st : NULL};
    const int stage_rank[2] = {0, 1};
    ct_executor e;
    ct_executor_init(&e, 2, stages, &pp, stage_rank);

    // Per rank: GPipe, 1F1B, split (I then W), and GPipe with the backwards in reverse order.
    enum { NS = 4 };
    const char *names[NS] = {"gpipe", "1f1b", "split", "gpipe_reversed"};
    const char *text0[NS] = {
        "0F0 0SEND_F0 0F1 0SEND_F1 0F2 0SEND_F2 0F3 0SEND_F3 0RECV_B0 0B0 0RECV_B1 0B1 0RECV_B2 0B2 0RECV_B3 0B3 "
        "REDUCE_GRADS RESHARD",
        "0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0F2 0SEND_F2 0RECV_B1 0B1 0F3 0SEND_F3 0RECV_B2 0B2 0RECV_B3 0B3 "
        "REDUCE_GRADS RESHARD",
        "0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0I0 0F2 0SEND_F2 0RECV_B1 0I1 0W0 0F3 0SEND_F3 0RECV_B2 0I2 0W1 "
        "0RECV_B3 0I3 0W2 0W3 REDUCE_GRADS RESHARD",
        "0F0 0SEND_F0 0F1 0SEND_F1 0F2 0SEND_F2 0F3 0SEND_F3 0RECV_B3 0B3 0RECV_B2 0B2 0RECV_B1 0B1 0RECV_B0 0B0 "
        "REDUCE_GRADS RESHARD",
    };
    const char *text1[NS] = {
        "1RECV_F0 1F0 1RECV_F1 1F1 1RECV_F2 1F2 1RECV_F3 1F3 1B0 1SEND_B0 1B1 1SEND_B1 1B2 1SEND_B2 1B3 1SEND_B3 "
        "REDUCE_GRADS RESHARD",
        "1RECV_F0 1F0 1B0 1SEND_B0 1RECV_F1 1F1 1B1 1SEND_B1 1RECV_F2 1F2 1B2 1SEND_B2 1RECV_F3 1F3 1B3 1SEND_B3 "
        "REDUCE_GRADS RESHARD",
        "1RECV_F0 1F0 1I0 1SEND_B0 1RECV_F1 1F1 1I1 1SEND_B1 1W0 1RECV_F2 1F2 1I2 1SEND_B2 1W1 1RECV_F3 1F3 1I3 "
        "1SEND_B3 1W2 1W3 REDUCE_GRADS RESHARD",
        "1RECV_F0 1F0 1RECV_F1 1F1 1RECV_F2 1F2 1RECV_F3 1F3 1B3 1SEND_B3 1B2 1SEND_B2 1B1 1SEND_B1 1B0 1SEND_B0 "
        "REDUCE_GRADS RESHARD",
    };
    ct_schedule s[NS];
    parse_all(s, me == 0 ? text0 : text1, NS);
    const ct_schedule *lists[NS] = {&s[0], &s[1], &s[2], &s[3]};
    int n_mb[NS] = {N_TOT, N_TOT, N_TOT, N_TOT};
    bool training[NS] = {true, true, true, true};
    CHECK(ct_executor_plan(&e, lists, n_mb, training, NS) == CT_OK, "plan: %s", ct_last_error());
    CHECK(st.split_backward, "the split schedule needs split slots");
    // GPipe holds every micro-batch; the stage that receives activations has one slot more, for
    // the next receive posted ahead while the current micro-batch computes.
    CHECK(st.n_slots == N_TOT + me, "stage %d: %d slots, GPipe holds %d micro-batches (+1 on the receiving stage)",
          me, st.n_slots, N_TOT);

    // This stage's groups: 0 .. cut on rank 0, cut+1 .. L+1 on rank 1 (contiguous in the block).
    const long own_lo = me == 0 ? 0 : r.t.group_offset[cut + 1];
    const long own_hi = me == 0 ? r.t.group_offset[cut + 1] : P;
    CHECK(sum_squares(gref + own_lo, own_hi - own_lo) > 1e-8, "reference gradients of stage %d are (nearly) zero", me);
    for (int k = 0; k < NS; k++) {
        memset(r.grads, 0, P * sizeof(float));
        ct_comm_stats_reset(&pp);
        double loss = ct_executor_run(&e, &s[k], r.mbs, N_TOT, true, gs);
        // One activation or gradient message per micro-batch each way, all of B·T rows of dim C.
        CHECK(pp.stats[CT_COMM_SEND].calls == N_TOT && pp.stats[CT_COMM_RECV].calls == N_TOT,
              "%s: rank %d sent %lld and received %lld messages, want %d each", names[k], me,
              pp.stats[CT_COMM_SEND].calls, pp.stats[CT_COMM_RECV].calls, N_TOT);
        CHECK(pp.stats[CT_COMM_SEND].bytes == (double)N_TOT * B * T * r.m.dim * sizeof(float),
              "%s: rank %d sent %g bytes", names[k], me, pp.stats[CT_COMM_SEND].bytes);
        if (me == 1)
            CHECK(loss == lref, "%s: loss %.17g vs reference %.17g", names[k], loss, lref);
        else
            CHECK(loss == 0, "%s: the stage without the head returned loss %g", names[k], loss);
        long outside = count_nonzero(r.grads, own_lo) + count_nonzero(r.grads + own_hi, P - own_hi);
        CHECK(outside == 0, "%s: rank %d wrote %ld gradients of the other stage", names[k], me, outside);
        if (k < 3) {
            long d = count_differing(r.grads + own_lo, gref + own_lo, own_hi - own_lo);
            CHECK(d == 0, "%s: rank %d: %ld of %ld gradients differ from the reference (rel err %g)", names[k], me, d,
                  own_hi - own_lo, rel_err(r.grads + own_lo, gref + own_lo, own_hi - own_lo));
        } else {
            // Backwards in reverse micro-batch order add the micro-batches' contributions into each
            // gradient in the other order: the same sums, rounded differently.
            double err = rel_err(r.grads + own_lo, gref + own_lo, own_hi - own_lo);
            CHECK(err <= 1e-5, "%s: rank %d: gradient rel err %g", names[k], me, err);
        }
    }
    for (int k = 0; k < NS; k++) ct_schedule_free(&s[k]);
    ct_executor_free(&e);
    ct_stage_free(&st);
    ct_comm_group_free(&pp);
    free(gref);
    rig_free(&r);
}

// ------------------------------------------------------------------ (a') messages tagged apart

// Every send and receive the pipeline group starts, as (peer, tag): the transport is MPI's,
// wrapped so the test sees what the executor asked it to match on.
enum { MAX_MSG = 64 };
typedef struct {
    int peer, tag;
} msg;
static msg sent[MAX_MSG], received[MAX_MSG];
static int n_sent, n_received;
static ct_comm_backend recording;

static void record_send(ct_group *g, const void *buf, size_t count, ct_dtype dt, int peer, int tag,
                        ct_comm_handle *h) {
    if (n_sent < MAX_MSG) sent[n_sent++] = (msg){peer, tag};
    ct_comm_backend_mpi.send(g, buf, count, dt, peer, tag, h);
}

static void record_recv(ct_group *g, void *buf, size_t count, ct_dtype dt, int peer, int tag, ct_comm_handle *h) {
    if (n_received < MAX_MSG) received[n_received++] = (msg){peer, tag};
    ct_comm_backend_mpi.recv(g, buf, count, dt, peer, tag, h);
}

// Messages that share peer and tag can only be told apart by the order they travel in.
static int shared_tags(const msg *m, int n) {
    int shared = 0;
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++) shared += m[i].peer == m[j].peer && m[i].tag == m[j].tag;
    return shared;
}

// Four one-layer stages, round-robin on two ranks (rank 0: stages 0 and 2, rank 1: 1 and 3), under
// the generated Interleaved1F1B lists: stage 1 receives micro-batch m's activation from stage 0
// and its gradient from stage 2, both from rank 0 (stage 2 likewise from rank 1). Each of a
// step's messages between the two ranks carries its own tag, so a receive can only match the one
// message meant for it, whatever order they travel in; and the step gives the reference's loss
// and gradients bit for bit. (Tags alone are checked: MPI matches same-tag messages from one
// sender in the order sent, and a legal schedule sends these two in order, so a shared tag would
// still deliver right here -- until a receive is posted further ahead or a transport reorders.)
static void test_forward_and_backward_messages_tagged_apart(void) {
    if (world.size != 2) return;
    rig r;
    rig_init(&r, 4, 64, 7);
    const int me = world.rank, n_stages = 4, pp_deg = 2;
    const long P = r.t.total;
    const float gs = 1.0f / (float)valid_tokens(r.mbs, N_TOT);
    float *gref = ct_xmalloc(P * sizeof(float)), *gsum = ct_xmalloc(P * sizeof(float));
    double lref = reference(&r, r.mbs, N_TOT, gs, gref);

    ct_group pp;
    CHECK(ct_comm_group_split(&world, 0, world.rank, "pp", &pp) == CT_OK, "%s", ct_last_error());
    recording = *pp.ops;
    recording.send = record_send;
    recording.recv = record_recv;
    pp.ops = &recording;
    int stage_rank[4];
    ct_pp_stage_ranks(CT_PP_ROUND_ROBIN, pp_deg, 2, stage_rank);
    ct_stage st[4];
    ct_stage *stages[4] = {NULL, NULL, NULL, NULL};
    for (int s = 0; s < n_stages; s++) {
        if (stage_rank[s] != me) continue;
        ct_stage_spec spec = {.k = kern, .cfg = &r.m, .layer_begin = s, .layer_end = s + 1, .has_embedding = s == 0,
                              .has_head = s == n_stages - 1, .B = B, .T = T, .ops = ct_stage_ops_local(kern),
                              .weights = &r.w, .grads = &r.g};
        ct_stage_init(&st[s], &spec);
        stages[s] = &st[s];
    }
    ct_executor e;
    ct_executor_init(&e, n_stages, stages, &pp, stage_rank);
    ct_schedule lists[2];
    CHECK(ct_pp_generate(CT_PP_INTERLEAVED_1F1B, pp_deg, 2, N_TOT, lists) == CT_OK, "%s", ct_last_error());
    const ct_schedule *mine[1] = {&lists[me]};
    int n_mb[1] = {N_TOT};
    bool training[1] = {true};
    CHECK(ct_executor_plan(&e, mine, n_mb, training, 1) == CT_OK, "plan: %s", ct_last_error());

    memset(r.grads, 0, P * sizeof(float));
    n_sent = n_received = 0;
    double loss = ct_executor_run(&e, &lists[me], r.mbs, N_TOT, true, gs);
    // Each rank: an activation out of, and a gradient into, every stage whose neighbour is on the
    // other rank -- 3 of its 4 stage boundaries, N_TOT micro-batches each.
    CHECK(n_sent == 3 * N_TOT && n_received == 3 * N_TOT, "rank %d sent %d and received %d messages, want %d each",
          me, n_sent, n_received, 3 * N_TOT);
    int ss = shared_tags(sent, n_sent), sr = shared_tags(received, n_received);
    CHECK(ss == 0 && sr == 0, "rank %d: %d pairs of its sends and %d pairs of its receives share peer and tag", me, ss,
          sr);
    // Each parameter's gradient is written on one rank and stays zero on the other: the sum is exact.
    ct_comm_all_reduce(&world, r.grads, gsum, (size_t)P, CT_F32, CT_COMM_SUM);
    long d = count_differing(gsum, gref, P);
    CHECK(d == 0, "rank %d: %ld of %ld gradients differ from the reference (rel err %g)", me, d, P,
          rel_err(gsum, gref, P));
    if (me == stage_rank[n_stages - 1]) CHECK(loss == lref, "loss %.17g vs reference %.17g", loss, lref);

    ct_pp_lists_free(lists, pp_deg);
    ct_executor_free(&e);
    for (int s = 0; s < n_stages; s++)
        if (stages[s]) ct_stage_free(&st[s]);
    pp.ops = ct_comm_backend_get("mpi");
    ct_comm_group_free(&pp);
    free(gref);
    free(gsum);
}

// ------------------------------------------------------------------ (b), (c): tp and FSDP

// One rank's distributed model, wired as the trainer's build_stage does.
typedef struct {
    ct_group tpg, shard, repl;
    ct_model_config local;
    ct_param_table table;  // this tp rank's registry
    ct_model_weights w, g;
    ct_fsdp f;
    ct_tp tp;
    ct_stage st;
    ct_executor e;
    int coord[CT_DIM_COUNT];  // this rank's mesh coordinates (which copies it owns)
} dist;

// tp_size 2: tp over the world, shards of one; tp_size 1: FSDP over the world.
static void dist_init(dist *d, rig *r, int tp_size, bool sp, ct_reshard_policy policy) {
    memset(d, 0, sizeof *d);
    int wr = world.rank;
    CHECK(ct_comm_group_split(&world, tp_size == 1 ? wr : 0, wr, "tp", &d->tpg) == CT_OK, "%s", ct_last_error());
    CHECK(ct_comm_group_split(&world, tp_size == 1 ? 0 : wr, wr, "fsdp", &d->shard) == CT_OK, "%s", ct_last_error());
    CHECK(ct_comm_group_split(&world, wr, 0, "dp_replicate", &d->repl) == CT_OK, "%s", ct_last_error());
    CHECK(ct_model_config_local(&r->m, d->tpg.size, &d->local) == CT_OK, "%s", ct_last_error());
    ct_param_table_build_tp(&d->table, &r->m, d->tpg.rank, d->tpg.size);
    ct_model_weights_init(&d->w, &d->table, &r->m, NULL);
    ct_model_weights_init(&d->g, &d->table, &r->m, NULL);
    ct_fsdp_init(&d->f, kern, &d->table, &d->shard, &d->repl, policy, &d->w, &d->g);
    // This rank's shard of its tp slice of the reference's parameters, run by run through the
    // store's descriptors (as the trainer's load_initial reads a model file).
    const ct_param_store *st = &d->f.store;
    for (int i = 0; i < st->count; i++) {
        const ct_param_shard *sh = &st->shards[i];
        const ct_param *gp = ct_param_find(&r->t, sh->param->name);
        ct_shard_iter it = CT_SHARD_ITER_INIT;
        ct_shard_run run;
        while (ct_shard_next_run(&sh->desc, &it, &run))
            memcpy(st->params + sh->offset + run.local, r->params + gp->offset + run.global, run.len * sizeof(float));
    }
    d->coord[tp_size == 1 ? CT_DIM_DP_SHARD : CT_DIM_TP] = world.rank;
    d->tp = (ct_tp){.k = kern, .group = &d->tpg, .sequence_parallel = sp && d->tpg.size > 1, .gather_logits = false,
                    .store = &d->f.store};
    ct_stage_ops ops = ct_stage_ops_local(kern);
    ct_tp_apply(&d->tp, &ops);
    ops.weights = ct_fsdp_weight_ops(&d->f);
    ct_stage_spec spec = {.k = kern, .cfg = &d->local, .layer_begin = 0, .layer_end = r->m.n_layers,
                          .has_embedding = true, .has_head = true, .B = B, .T = T, .ops = ops, .weights = &d->w,
                          .grads = &d->g};
    ct_stage_init(&d->st, &spec);
    ct_stage *stages[1] = {&d->st};
    ct_executor_init(&d->e, 1, stages, NULL, NULL);
    ct_executor_add_reducer(&d->e, ct_fsdp_reduce_replicas, &d->f);
    ct_executor_add_reducer(&d->e, ct_tp_reduce_replicated_grads, &d->tp);
}

static void dist_free(dist *d) {
    ct_executor_free(&d->e);
    ct_stage_free(&d->st);
    ct_fsdp_free(&d->f);
    ct_model_weights_free(&d->w);
    ct_model_weights_free(&d->g);
    ct_param_table_free(&d->table);
    ct_comm_group_free(&d->tpg);
    ct_comm_group_free(&d->shard);
    ct_comm_group_free(&d->repl);
}

// Runs each schedule from zeroed gradient shards; shard copies into gout[k], losses into loss[k].
static void dist_run(dist *d, const char *const *text, int ns, const ct_microbatch *mbs, int n_mb, float gs,
                     float **gout, double *loss) {
    ct_schedule s[4];
    parse_all(s, text, ns);
    const ct_schedule *lists[4];
    int nm[4];
    bool tr[4];
    for (int k = 0; k < ns; k++) lists[k] = &s[k], nm[k] = n_mb, tr[k] = true;
    CHECK(ct_executor_plan(&d->e, lists, nm, tr, ns) == CT_OK, "plan: %s", ct_last_error());
    for (int k = 0; k < ns; k++) {
        memset(d->f.grads, 0, d->f.local_numel * sizeof(float));
        loss[k] = ct_executor_run(&d->e, &s[k], mbs, n_mb, true, gs);
        memcpy(gout[k], d->f.grads, d->f.local_numel * sizeof(float));
    }
    for (int k = 0; k < ns; k++) ct_schedule_free(&s[k]);
}

// The gradient shards g (local_numel) of every rank in the global layout, through the store's
// gather (each element from the rank that owns its copy).
static void gather_grads(dist *d, rig *r, float *g, float *full) {
    ct_param_store gs = d->f.store;
    gs.params = g;
    ct_param_store_gather(&gs, kern, d->coord, &r->t, &world, full);
}

// Worst over the tensors of max |a - ref| / max |ref|; the worst tensor's name into worst.
static double grad_err_vs_reference(const rig *r, const float *a, const float *gref, char *worst, size_t wn) {
    double e = 0;
    for (int i = 0; i < r->t.count; i++) {
        const ct_param *p = &r->t.params[i];
        double err = rel_err(a + p->offset, gref + p->offset, p->numel);
        if (err > e || isnan(err)) {
            e = isnan(err) ? INFINITY : err;
            snprintf(worst, wn, "%s", p->name);
        }
    }
    return e;
}

static void tp_case(bool sp) {
    if (world.size != 2) return;
    rig r;
    rig_init(&r, 4, 64, 7);
    enum { NMB = 3 };
    const long valid = valid_tokens(r.mbs, NMB);
    const float gs = 1.0f / (float)valid;
    float *gref = ct_xmalloc(r.t.total * sizeof(float));
    double lref = reference(&r, r.mbs, NMB, gs, gref);

    dist d;
    dist_init(&d, &r, 2, sp, CT_RESHARD_DEFAULT);
    CHECK(d.st.N_local == (sp ? B * T / 2 : B * T), "N_local %ld", d.st.N_local);
    const char *text[2] = {"0F0 0B0 0F1 0B1 0F2 0B2 REDUCE_GRADS RESHARD",
                           "0F0 0F1 0F2 0I2 0I1 0I0 0W0 0W1 0W2 REDUCE_GRADS RESHARD"};
    long n = d.f.local_numel;
    float *g[2] = {ct_xmalloc(n * sizeof(float)), ct_xmalloc(n * sizeof(float))};
    double loss[2];
    dist_run(&d, text, 2, r.mbs, NMB, gs, g, loss);

    CHECK(loss[0] == loss[1], "sp %d: losses %.17g (whole) vs %.17g (split)", sp, loss[0], loss[1]);
    double other;
    ct_comm_all_reduce(&world, &loss[0], &other, 1, CT_F64, CT_COMM_MAX);
    CHECK(other == loss[0], "sp %d: the tp ranks' losses differ (%.17g vs max %.17g)", sp, loss[0], other);
    CHECK_CLOSE(loss[0], lref, 1e-5, 0);
    long diff = count_differing(g[0], g[1], n);
    CHECK(diff == 0, "sp %d: %ld of %ld gradients differ between the schedules (rel err %g)", sp, diff, n,
          rel_err(g[1], g[0], n));
    char worst[CT_PARAM_NAME] = "";
    float *full = ct_xmalloc(r.t.total * sizeof(float));
    gather_grads(&d, &r, g[0], full);
    double err = grad_err_vs_reference(&r, full, gref, worst, sizeof worst);
    CHECK(err <= 2e-5, "sp %d: gradient vs reference: rel err %g in %s", sp, err, worst);
    CHECK(sum_squares(g[0], n) > 1e-8, "gradients are (nearly) zero");
    free(full);
    // Replicated tensors (norm weights): the same gradient bits on both tp ranks.
    const ct_param_store *st = &d.f.store;
    int n_repl = 0;
    for (int i = 0; i < st->count; i++) {
        const ct_param_shard *sh = &st->shards[i];
        if (!(sh->desc.replicated_over & CT_DIM_BIT(CT_DIM_TP))) continue;
        long m = sh->desc.flat_count;
        float *both = ct_xmalloc(2 * m * sizeof(float));
        ct_comm_all_gather(&world, g[0] + sh->offset, both, (size_t)m, CT_F32);
        long dd = count_differing(both, both + m, m);
        CHECK(dd == 0, "sp %d: %s: %ld of %ld gradient elements differ between tp ranks", sp, sh->param->name, dd, m);
        free(both);
        n_repl++;
    }
    CHECK(n_repl == 2 * r.m.n_layers + 1, "%d replicated tensors, want the %d norms", n_repl, 2 * r.m.n_layers + 1);
    free(g[0]);
    free(g[1]);
    dist_free(&d);
    free(gref);
    rig_free(&r);
}

static void test_tensor_sequence_parallel(void) { tp_case(true); }
static void test_tensor_parallel_no_sp(void) { tp_case(false); }

static void test_fsdp_two_shards(void) {
    if (world.size != 2) return;
    rig r;
    rig_init(&r, 4, 64, 7);
    enum { NMB = N_TOT / 2 };  // micro-batches per rank: rank q runs [q·NMB, (q+1)·NMB)
    const long valid = valid_tokens(r.mbs, N_TOT);
    const float gs = 1.0f / (float)valid;
    const long P = r.t.total;
    float *gref = ct_xmalloc(P * sizeof(float)), *full = ct_xmalloc(P * sizeof(float));
    reference(&r, r.mbs, N_TOT, gs, gref);                                   // both ranks' data: the step
    const ct_microbatch *mine = r.mbs + world.rank * NMB;
    double lmine = reference(&r, mine, NMB, gs, NULL);                       // this rank's forward alone
    const char *text[2] = {"0F0 0B0 0F1 0B1 REDUCE_GRADS RESHARD", "0F0 0F1 0I1 0I0 0W0 0W1 REDUCE_GRADS RESHARD"};
    const ct_reshard_policy pol[3] = {CT_RESHARD_DEFAULT, CT_RESHARD_ALWAYS, CT_RESHARD_NEVER};
    const char *pname[3] = {"default", "always", "never"};
    float *first = NULL;
    long n = 0;
    for (int q = 0; q < 3; q++) {
        dist d;
        dist_init(&d, &r, 1, false, pol[q]);
        CHECK(d.f.shard_group->size == 2, "shard group of %d", d.f.shard_group->size);
        n = d.f.local_numel;
        CHECK(n < P, "a shard of %ld elements holds the whole model (%ld)", n, P);
        float *g[2] = {ct_xmalloc(n * sizeof(float)), ct_xmalloc(n * sizeof(float))};
        double loss[2];
        dist_run(&d, text, 2, mine, NMB, gs, g, loss);
        CHECK(loss[0] == lmine && loss[1] == lmine, "%s: losses %.17g %.17g vs reference %.17g", pname[q], loss[0],
              loss[1], lmine);
        long diff = count_differing(g[0], g[1], n);
        CHECK(diff == 0, "%s: %ld of %ld gradient shard elements differ between the schedules (rel err %g)",
              pname[q], diff, n, rel_err(g[1], g[0], n));
        if (!first) {
            first = g[0];
            g[0] = NULL;
        } else {
            diff = count_differing(g[0], first, n);
            CHECK(diff == 0, "%s vs default: %ld of %ld gradient shard elements differ", pname[q], diff, n);
        }
        char worst[CT_PARAM_NAME] = "";
        float *gfull = ct_xmalloc(P * sizeof(float));
        gather_grads(&d, &r, g[1], gfull);
        double err = grad_err_vs_reference(&r, gfull, gref, worst, sizeof worst);
        free(gfull);
        CHECK(err <= 1e-5, "%s: gradient shard vs reference: rel err %g in %s", pname[q], err, worst);
        CHECK(sum_squares(g[1], n) > 1e-8, "gradient shard is (nearly) zero");
        ct_fsdp_gather_full(&d.f, full);
        long pd = count_differing(full, r.params, P);
        CHECK(pd == 0, "%s: %ld of %ld gathered parameters differ from the reference's", pname[q], pd, P);
        free(g[0]);
        free(g[1]);
        dist_free(&d);
    }
    free(first);
    free(gref);
    free(full);
    rig_free(&r);
}

// UNSHARD / RESHARD actions: a stage gathered once for the whole step (every micro-batch, forward
// and backward), its gradient summed unsharded and reduce-scattered once at RESHARD. The
// gradient shards equal per-use gathering within rounding (the micro-batches are now summed
// before the ranks, not after: a different order, so not bit for bit), and the step moves
// exactly one all-gather and one reduce-scatter of every group -- against 2 gathers and 1
// reduce-scatter per group and micro-batch under `always`.
static void test_fsdp_unshard_actions(void) {
    if (world.size != 2) return;
    rig r;
    rig_init(&r, 4, 64, 7);
    enum { NMB = N_TOT / 2 };
    const float gs = 1.0f / (float)valid_tokens(r.mbs, N_TOT);
    const ct_microbatch *mine = r.mbs + world.rank * NMB;
    dist d;
    dist_init(&d, &r, 1, false, CT_RESHARD_ALWAYS);
    long n = d.f.local_numel;
    float *g[2] = {ct_xmalloc(n * sizeof(float)), ct_xmalloc(n * sizeof(float))};
    double loss[2], gathered[2], scattered[2];
    const char *text[2] = {"0F0 0B0 0F1 0B1 REDUCE_GRADS RESHARD",
                           "0UNSHARD 0F0 0B0 0F1 0B1 0RESHARD REDUCE_GRADS RESHARD"};
    for (int k = 0; k < 2; k++) {
        ct_comm_stats_reset(&d.shard);
        dist_run(&d, &text[k], 1, mine, NMB, gs, &g[k], &loss[k]);
        gathered[k] = d.shard.stats[CT_COMM_ALL_GATHER].bytes;
        scattered[k] = d.shard.stats[CT_COMM_REDUCE_SCATTER].bytes;
    }
    CHECK(loss[0] == loss[1], "losses %.17g vs %.17g", loss[0], loss[1]);
    double err = rel_err(g[1], g[0], n);
    CHECK(err <= 1e-6, "gradient shards with UNSHARD differ: rel err %g", err);
    CHECK(sum_squares(g[1], n) > 1e-8, "gradient shard is (nearly) zero");
    double once = 0;  // one all-gather of every group: (N - 1) shards of it received
    for (int q = 0; q < d.f.n_groups; q++) once += (double)d.f.shard_numel[q] * (world.size - 1) * sizeof(float);
    CHECK(gathered[1] == once, "UNSHARD step gathered %.0f bytes, one gather of each group is %.0f", gathered[1],
          once);
    CHECK(gathered[0] > 2 * once, "per-use gathers under `always` moved %.0f bytes, expected well above %.0f",
          gathered[0], 2 * once);
    CHECK(scattered[1] == once, "UNSHARD step reduce-scattered %.0f bytes, one of each group is %.0f", scattered[1],
          once);
    CHECK(scattered[0] == NMB * once, "per-use reduce-scatters moved %.0f bytes, one per group and micro-batch %.0f",
          scattered[0], NMB * once);
    CHECK(d.f.n_slots == d.f.n_groups, "UNSHARD of the whole model needs a slot per group: %d of %d", d.f.n_slots,
          d.f.n_groups);
    free(g[0]);
    free(g[1]);
    dist_free(&d);
    rig_free(&r);
}

int main(int argc, char **argv) {
    kern = ct_kernels_get("cpu");
    if (!ct_mpi_test_is_child(argc, argv)) {
        setenv("OMP_NUM_THREADS", "1", 1);  // two ranks on few cores
        int rc = ct_mpi_test_spawn(argv[0], 2, 240, NULL);
        if (rc != 0) {
            printf("FAIL mpirun_np2: exit %d\n", rc);
            ct_test_failures++;
        }
        CT_TEST_EXIT();
    }
    if (ct_comm_init(&argc, &argv) != CT_OK || ct_comm_group_world(&world, 30) != CT_OK) {
        printf("FAIL init: %s\n", ct_last_error());
        return 1;
    }
    CT_MPI_RUN(test_pipeline_two_stages);
    CT_MPI_RUN(test_forward_and_backward_messages_tagged_apart);
    CT_MPI_RUN(test_tensor_sequence_parallel);
    CT_MPI_RUN(test_tensor_parallel_no_sp);
    CT_MPI_RUN(test_fsdp_two_shards);
    CT_MPI_RUN(test_fsdp_unshard_actions);
    ct_comm_group_free(&world);
    ct_comm_finalize();
    CT_TEST_EXIT();
}
