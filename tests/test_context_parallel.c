// Context parallel attention (parallel/context_parallel.h).
//
// Started plainly: positions, sequence-length refusals, the log-sum-exp merge (with -inf rows),
// the analytic byte counts, planning refusals, a group of one; then itself under mpirun at 2
// ranks (2 threads each) and 4 ranks (1 thread). Under MPI every rank builds the same global
// q, k, v, dout (B, T, heads, HS) from one seed, holds its tokens in a fused qkv buffer (token
// stride QKV, as the model has them), runs the op of ct_cp_apply and compares with full causal
// attention over the whole sequence in float64: out and lse forward, dq dk dv backward
// (accumulated onto non-zero gradients). For both rotate methods x both balancers, GQA, odd head
// size, chunks smaller than and straddling the kernel's 64-row tiles; it also checks the chunk
// pairs the ring skips (every rank the same count with head-tail, r + 1 calls with a contiguous
// split) and the bytes against ct_cp_expected_bytes. The all-gather's bf16 calls are held to the
// bf16 kernel run on the whole sequence in one process. At 4 ranks it also runs two cp groups of
// 2 side by side (cp inside a larger mesh).
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "core/float_formats.h"
#include "mpi_test.h"
#include "test_rand.h"
#include "parallel/context_parallel.h"
#include "parallel/cp_internal.h"
#include "parallel/parallelize.h"

static ct_group world;
static const ct_kernels *kern;


// ---- float64 reference: causal attention over the whole sequence -----------------------------

typedef struct {
    long B, T, NH, NKV, HS;
    float *q, *k, *v, *dout;        // (B, T, NH|NKV, HS) contiguous
    double *out, *lse;              // (B, T, NH, HS), (B, NH, T)
    double *dq, *dk, *dv;           // layouts of q, k, v
} problem;

static void reference(problem *p) {
    const long B = p->B, T = p->T, NH = p->NH, NKV = p->NKV, HS = p->HS, grp = NH / NKV;
    const double scale = 1.0 / sqrt((double)HS);
    double *P = malloc(sizeof(double) * T);
    for (long b = 0; b < B; b++)
        for (long h = 0; h < NH; h++) {
            const long g = h / grp;
            for (long i = 0; i < T; i++) {
                const float *qi = p->q + ((b * T + i) * NH + h) * HS;
                double mx = -INFINITY, sum = 0;
                for (long j = 0; j <= i; j++) {
                    const float *kj = p->k + ((b * T + j) * NKV + g) * HS;
                    double s = 0;
                    for (long d = 0; d < HS; d++) s += (double)qi[d] * kj[d];
                    P[j] = s * scale;
                    mx = P[j] > mx ? P[j] : mx;
                }
                for (long j = 0; j <= i; j++) sum += exp(P[j] - mx);
                const double L = mx + log(sum);
                p->lse[(b * NH + h) * T + i] = L;
                double *o = p->out + ((b * T + i) * NH + h) * HS;
                const float *dO = p->dout + ((b * T + i) * NH + h) * HS;
                for (long j = 0; j <= i; j++) {
                    P[j] = exp(P[j] - L);
                    for (long d = 0; d < HS; d++) o[d] += P[j] * p->v[((b * T + j) * NKV + g) * HS + d];
                }
                double D = 0;
                for (long d = 0; d < HS; d++) D += (double)dO[d] * o[d];
                for (long j = 0; j <= i; j++) {
                    const float *kj = p->k + ((b * T + j) * NKV + g) * HS, *vj = p->v + ((b * T + j) * NKV + g) * HS;
                    double dp = 0;
                    for (long d = 0; d < HS; d++) dp += (double)dO[d] * vj[d];
                    const double ds = P[j] * (dp - D);
                    for (long d = 0; d < HS; d++) {
                        p->dv[((b * T + j) * NKV + g) * HS + d] += P[j] * dO[d];
                        p->dq[((b * T + i) * NH + h) * HS + d] += scale * ds * kj[d];
                        p->dk[((b * T + j) * NKV + g) * HS + d] += scale * ds * qi[d];
                    }
                }
            }
        }
    free(P);
}

static problem make_problem(long B, long T, long NH, long NKV, long HS, uint64_t seed) {
    problem p = {.B = B, .T = T, .NH = NH, .NKV = NKV, .HS = HS};
    const long nq = B * T * NH * HS, nk = B * T * NKV * HS;
    p.q = malloc(sizeof(float) * nq), p.dout = malloc(sizeof(float) * nq);
    p.k = malloc(sizeof(float) * nk), p.v = malloc(sizeof(float) * nk);
    p.out = calloc(nq, sizeof(double)), p.dq = calloc(nq, sizeof(double)), p.lse = calloc(B * NH * T, sizeof(double));
    p.dk = calloc(nk, sizeof(double)), p.dv = calloc(nk, sizeof(double));
    rng_state = seed;
    for (long i = 0; i < nq; i++) p.q[i] = frand(1.5f), p.dout[i] = frand(1);
    for (long i = 0; i < nk; i++) p.k[i] = frand(1.5f), p.v[i] = frand(1);
    reference(&p);
    return p;
}

static void free_problem(problem *p) {
    free(p->q), free(p->k), free(p->v), free(p->dout), free(p->out), free(p->lse), free(p->dq), free(p->dk),
        free(p->dv);
}

// max |got - want| / max |want| over n values with strides (for strided local rows)
static double rel_err_rows(const float *got, long ldg, const double *want, long ldw, long rows, long w) {
    double maxd = 0, maxw = 1e-6;
    for (long r = 0; r < rows; r++)
        for (long d = 0; d < w; d++) {
            double a = got[r * ldg + d], b = want[r * ldw + d], e = fabs(a - b);
            maxw = fabs(b) > maxw ? fabs(b) : maxw;
            maxd = e > maxd || isnan(e) ? (isnan(e) ? INFINITY : e) : maxd;
        }
    return maxd / maxw;
}

// ---- one distributed case ----------------------------------------------------------------------

// planB: the B the op is planned for (a call may bring fewer sequences than planned).
static void one_case_planned(ct_group *g, ct_cp_rotate rot, ct_cp_balance bal, long planB, long B, long T, long NH,
                             long NKV, long HS) {
    const char *name = rot == CT_CP_RING ? (bal == CT_CP_HEADTAIL ? "ring/headtail" : "ring/contiguous")
                                         : (bal == CT_CP_HEADTAIL ? "allgather/headtail" : "allgather/contiguous");
    problem p = make_problem(B, T, NH, NKV, HS, 0xC0FFEEull + (uint64_t)(T * 7 + NKV * 3 + HS));
    const int P = g->size, r = g->rank;
    const long Tl = T / P, QKV = (NH + 2 * NKV) * HS + 3;  // padded: strides are not the head widths
    int32_t *pos = malloc(sizeof(int32_t) * Tl);
    ct_cp_positions(bal, r, P, T, pos);

    ct_cp cp;
    CHECK(ct_cp_init(&cp, kern, g, rot, bal, planB, T, NH, NKV, HS) == CT_OK, "%s", ct_last_error());
    ct_stage_ops ops = ct_stage_ops_local(kern);
    ct_cp_apply(&cp, &ops);
    CHECK(P == 1 || ops.attention.ctx == &cp, "%s: table not replaced", name);

    // this rank's tokens in one fused buffer (B, Tl, QKV): [q heads | k heads | v heads | pad]
    float *qkv = malloc(sizeof(float) * B * Tl * QKV), *dqkv = malloc(sizeof(float) * B * Tl * QKV);
    float *dqkv0 = malloc(sizeof(float) * B * Tl * QKV);
    float *out = malloc(sizeof(float) * B * Tl * NH * HS), *lse = malloc(sizeof(float) * B * NH * Tl);
    float *dout = malloc(sizeof(float) * B * Tl * NH * HS);
    rng_state = 99 + (uint64_t)r;
    for (long b = 0; b < B; b++)
        for (long t = 0; t < Tl; t++) {
            const long gt = b * T + pos[t];
            float *row = qkv + (b * Tl + t) * QKV;
            memcpy(row, p.q + gt * NH * HS, sizeof(float) * NH * HS);
            memcpy(row + NH * HS, p.k + gt * NKV * HS, sizeof(float) * NKV * HS);
            memcpy(row + (NH + NKV) * HS, p.v + gt * NKV * HS, sizeof(float) * NKV * HS);
            for (long d = (NH + 2 * NKV) * HS; d < QKV; d++) row[d] = NAN;  // must never be read
            memcpy(dout + (b * Tl + t) * NH * HS, p.dout + gt * NH * HS, sizeof(float) * NH * HS);
        }
    for (long i = 0; i < B * Tl * QKV; i++) dqkv0[i] = dqkv[i] = frand(0.1f);  // gradients accumulate
    float *scratch = malloc(sizeof(float) * ops.attention.scratch_floats(ops.attention.ctx, Tl, Tl, HS));
    ct_attention_args a = {.layer = 0, .B = B, .Tq = Tl, .Tk = Tl, .NH = NH, .NKV = NKV, .HS = HS,
                           .q = qkv, .k = qkv + NH * HS, .v = qkv + (NH + NKV) * HS, .ldq = QKV, .ldk = QKV,
                           .ldv = QKV, .q_pos = pos, .k_pos = pos, .out = out, .lse = lse, .scratch = scratch};

    ct_comm_stats_reset(g);
    ops.attention.forward(ops.attention.ctx, &a);
    const double fwd_bytes = ct_comm_stats_total_bytes(g);
    ops.attention.backward(ops.attention.ctx, &a, dout, dqkv, dqkv + NH * HS, dqkv + (NH + NKV) * HS);
    const double all_bytes = ct_comm_stats_total_bytes(g);

    // gather the reference rows of this rank's positions, then compare
    double *ro = malloc(sizeof(double) * B * Tl * NH * HS), *rq = malloc(sizeof(double) * B * Tl * NH * HS);
    double *rk = malloc(sizeof(double) * B * Tl * NKV * HS), *rv = malloc(sizeof(double) * B * Tl * NKV * HS);
    double lse_err = 0;
    for (long b = 0; b < B; b++)
        for (long t = 0; t < Tl; t++) {
            const long gt = b * T + pos[t], lt = b * Tl + t;
            for (long d = 0; d < NH * HS; d++) {
                ro[lt * NH * HS + d] = p.out[gt * NH * HS + d];
                rq[lt * NH * HS + d] = p.dq[gt * NH * HS + d];
            }
            for (long d = 0; d < NKV * HS; d++) {
                rk[lt * NKV * HS + d] = p.dk[gt * NKV * HS + d];
                rv[lt * NKV * HS + d] = p.dv[gt * NKV * HS + d];
            }
            for (long h = 0; h < NH; h++) {
                double e = fabs(lse[(b * NH + h) * Tl + t] - p.lse[(b * NH + h) * T + pos[t]]);
                lse_err = e > lse_err || isnan(e) ? (isnan(e) ? INFINITY : e) : lse_err;
            }
        }
    for (long i = 0; i < B * Tl * QKV; i++) dqkv[i] -= dqkv0[i];  // what backward added
    const double eo = rel_err_rows(out, NH * HS, ro, NH * HS, B * Tl, NH * HS);
    const double eq = rel_err_rows(dqkv, QKV, rq, NH * HS, B * Tl, NH * HS);
    const double ek = rel_err_rows(dqkv + NH * HS, QKV, rk, NKV * HS, B * Tl, NKV * HS);
    const double ev = rel_err_rows(dqkv + (NH + NKV) * HS, QKV, rv, NKV * HS, B * Tl, NKV * HS);
    CHECK(eo < 2e-5 && lse_err < 2e-5, "%s T %ld NKV %ld HS %ld: out rel err %.3g, lse err %.3g", name, T, NKV, HS,
          eo, lse_err);
    CHECK(eq < 1e-4 && ek < 1e-4 && ev < 1e-4, "%s T %ld NKV %ld HS %ld: rel err dq %.3g dk %.3g dv %.3g", name, T,
          NKV, HS, eq, ek, ev);
    int pad_ok = 1;  // backward never writes the padding columns
    for (long i = 0; i < B * Tl; i++)
        for (long d = (NH + 2 * NKV) * HS; d < QKV; d++) pad_ok &= dqkv[i * QKV + d] == 0.0f;
    CHECK(pad_ok, "%s: backward wrote the padding", name);

    // work: the ring's chunk pairs, each call or skip; the all-gather one call each way
    const ct_cp_counts c = cp.counts;
    if (P > 1 && rot == CT_CP_RING) {
        long want_calls = bal == CT_CP_HEADTAIL ? 2L * P + 1 : r + 1;
        long pairs = (bal == CT_CP_HEADTAIL ? 4L : 1L) * P;
        CHECK(c.forward_calls == want_calls && c.forward_skipped == pairs - want_calls, "%s rank %d: %ld calls, %ld "
              "skipped, want %ld of %ld", name, r, c.forward_calls, c.forward_skipped, want_calls, pairs);
        CHECK(c.backward_calls == want_calls && c.backward_skipped == pairs - want_calls, "%s rank %d: backward "
              "%ld calls, %ld skipped", name, r, c.backward_calls, c.backward_skipped);
    } else if (P > 1) {
        CHECK(c.forward_calls == 1 && c.backward_calls == 1 && c.forward_skipped == 0, "%s: %ld/%ld calls", name,
              c.forward_calls, c.backward_calls);
    }
    // the formula is for the planned B; bytes scale with the sequences a call brings
    const double fe = ct_cp_expected_bytes(&cp, false, false) * B / planB;
    const double ae = ct_cp_expected_bytes(&cp, true, false) * B / planB;
    CHECK(fwd_bytes == fe, "%s: forward moved %.0f bytes, expected %.0f", name, fwd_bytes, fe);
    CHECK(all_bytes == ae, "%s: forward+backward moved %.0f bytes, expected %.0f", name, all_bytes, ae);

    ct_cp_free(&cp);
    free(pos), free(qkv), free(dqkv), free(dqkv0), free(out), free(lse), free(dout), free(scratch);
    free(ro), free(rq), free(rk), free(rv);
    free_problem(&p);
}

static void one_case(ct_group *g, ct_cp_rotate rot, ct_cp_balance bal, long B, long T, long NH, long NKV, long HS) {
    one_case_planned(g, rot, bal, B, B, T, NH, NKV, HS);
}

// Every method x balancer on group g: GQA with an odd head size; chunks of 6 (T 24, cp 2) or 3
// (cp 4), and of 66 / 33 tokens (T 264) so that chunks straddle the 64-row kernel tiles;
// one kv head for all four query heads.
static void all_cases(ct_group *g) {
    for (int rot = 0; rot < 2; rot++)
        for (int bal = 0; bal < 2; bal++) {
            one_case(g, (ct_cp_rotate)rot, (ct_cp_balance)bal, 2, 24, 4, 2, 5);
            one_case(g, (ct_cp_rotate)rot, (ct_cp_balance)bal, 2, 264, 4, 2, 5);
            one_case(g, (ct_cp_rotate)rot, (ct_cp_balance)bal, 1, 40, 4, 1, 8);
            one_case_planned(g, (ct_cp_rotate)rot, (ct_cp_balance)bal, 3, 2, 40, 4, 2, 5);  // fewer than planned
        }
}

// ---- the bf16 calls (all-gather) ----------------------------------------------------------------

static uint16_t to_bf16(float x) { return ct_f32_to_bf16(x); }
static float from_bf16(uint16_t h) { return ct_bf16_to_f32(h); }

// The op's bf16 calls under allgather against the bf16 kernel on the whole sequence in one
// process (the same inputs, rounded to bf16 once): each query row sees the same keys in the same
// 64-key tiles either way, so out, lse and dq must be the same bits; dK, dV are summed over the
// ranks' queries in another order (their shares reduce-scattered), so they agree to fp32
// rounding of those sums: |a - b| <= 2^-22 (sum of |terms|) bounds it loosely, here taken over
// the row's largest reference value times the T terms a key sums at most. K|V travel in bf16:
// half the bytes of the fp32 gather.
static void one_case_bf16(ct_group *g, ct_cp_balance bal, long B, long T, long NH, long NKV, long HS) {
    const char *name = bal == CT_CP_HEADTAIL ? "allgather bf16/headtail" : "allgather bf16/contiguous";
    problem p = make_problem(B, T, NH, NKV, HS, 0xBF16ull + (uint64_t)(T * 7 + NKV * 3 + HS));
    const int P = g->size, r = g->rank;
    const long Tl = T / P, QKV = (NH + 2 * NKV) * HS + 3, nq = B * T * NH * HS, nk = B * T * NKV * HS;
    // the whole sequence in bf16, and the one-process kernel's results on it
    uint16_t *q16 = malloc(2 * nq), *k16 = malloc(2 * nk), *v16 = malloc(2 * nk), *o16 = malloc(2 * nq);
    for (long i = 0; i < nq; i++) q16[i] = to_bf16(p.q[i]);
    for (long i = 0; i < nk; i++) k16[i] = to_bf16(p.k[i]), v16[i] = to_bf16(p.v[i]);
    float *lse1 = malloc(sizeof(float) * B * NH * T), *dq1 = calloc(nq, sizeof(float));
    float *dk1 = calloc(nk, sizeof(float)), *dv1 = calloc(nk, sizeof(float));
    float *scr1 = malloc(sizeof(float) * kern->attention_scratch_floats(T, T, HS));
    kern->attention_forward_bf16(o16, lse1, q16, NH * HS, k16, NKV * HS, v16, NKV * HS, NULL, NULL, NULL, NULL, B, T, T,
                                 NH, NKV, HS, scr1);
    kern->attention_backward_bf16(dq1, dk1, dv1, p.dout, o16, lse1, q16, NH * HS, k16, NKV * HS, v16, NKV * HS, NULL,
                                  NULL, NULL, NULL, B, T, T, NH, NKV, HS, scr1);

    int32_t *pos = malloc(sizeof(int32_t) * Tl);
    ct_cp_positions(bal, r, P, T, pos);
    ct_cp cp;
    CHECK(ct_cp_init(&cp, kern, g, CT_CP_ALLGATHER, bal, B, T, NH, NKV, HS) == CT_OK, "%s", ct_last_error());
    ct_stage_ops ops = ct_stage_ops_local(kern);
    ct_cp_apply(&cp, &ops);
    CHECK(ops.attention.forward_bf16 && ops.attention.backward_bf16, "%s: no bf16 calls", name);
    uint16_t *qkv = malloc(2 * B * Tl * QKV), *out = malloc(2 * B * Tl * NH * HS);
    float *dqkv = calloc(B * Tl * QKV, sizeof(float)), *lse = malloc(sizeof(float) * B * NH * Tl);
    float *dout = malloc(sizeof(float) * B * Tl * NH * HS);
    for (long b = 0; b < B; b++)
        for (long t = 0; t < Tl; t++) {
            const long gt = b * T + pos[t];
            uint16_t *row = qkv + (b * Tl + t) * QKV;
            memcpy(row, q16 + gt * NH * HS, 2 * NH * HS);
            memcpy(row + NH * HS, k16 + gt * NKV * HS, 2 * NKV * HS);
            memcpy(row + (NH + NKV) * HS, v16 + gt * NKV * HS, 2 * NKV * HS);
            for (long d = (NH + 2 * NKV) * HS; d < QKV; d++) row[d] = 0x7fc0;  // a NaN: must never be read
            memcpy(dout + (b * Tl + t) * NH * HS, p.dout + gt * NH * HS, sizeof(float) * NH * HS);
        }
    float *scratch = malloc(sizeof(float) * ops.attention.scratch_floats(ops.attention.ctx, Tl, Tl, HS));
    ct_attention_args a = {.layer = 0, .B = B, .Tq = Tl, .Tk = Tl, .NH = NH, .NKV = NKV, .HS = HS,
                           .q16 = qkv, .k16 = qkv + NH * HS, .v16 = qkv + (NH + NKV) * HS, .ldq = QKV, .ldk = QKV,
                           .ldv = QKV, .q_pos = pos, .k_pos = pos, .out16 = out, .lse = lse, .scratch = scratch};
    ct_comm_stats_reset(g);
    ops.attention.forward_bf16(ops.attention.ctx, &a);
    const double fwd_bytes = ct_comm_stats_total_bytes(g);
    ops.attention.backward_bf16(ops.attention.ctx, &a, dout, dqkv, dqkv + NH * HS, dqkv + (NH + NKV) * HS);
    const double all_bytes = ct_comm_stats_total_bytes(g);

    long out_diff = 0, lse_diff = 0, dq_diff = 0;
    double dkv_err = 0, dkv_max = 0;
    for (long b = 0; b < B; b++)
        for (long t = 0; t < Tl; t++) {
            const long gt = b * T + pos[t], lt = b * Tl + t;
            out_diff += memcmp(out + lt * NH * HS, o16 + gt * NH * HS, 2 * NH * HS) != 0;
            dq_diff += memcmp(dqkv + lt * QKV, dq1 + gt * NH * HS, sizeof(float) * NH * HS) != 0;
            for (long h = 0; h < NH; h++)
                lse_diff += memcmp(lse + (b * NH + h) * Tl + t, lse1 + (b * NH + h) * T + pos[t], sizeof(float)) != 0;
            for (long d = 0; d < NKV * HS; d++) {
                const float gk = dqkv[lt * QKV + NH * HS + d], gv = dqkv[lt * QKV + (NH + NKV) * HS + d];
                const float wk = dk1[gt * NKV * HS + d], wv = dv1[gt * NKV * HS + d];
                dkv_err = fmax(dkv_err, fmax(fabs((double)gk - wk), fabs((double)gv - wv)));
                dkv_max = fmax(dkv_max, fmax(fabs((double)wk), fabs((double)wv)));
            }
        }
    CHECK(out_diff == 0 && lse_diff == 0 && dq_diff == 0,
          "%s T %ld NKV %ld HS %ld: rows differing from one process: out %ld, lse %ld, dq %ld", name, T, NKV, HS,
          out_diff, lse_diff, dq_diff);
    const double bound = 0x1p-22 * (double)T * dkv_max;
    CHECK(dkv_err <= bound, "%s T %ld: dk/dv differ by %.3g, bound %.3g", name, T, dkv_err, bound);
    double out_ref_err = 0;  // and the one-process bf16 result itself near the float64 truth
    for (long i = 0; i < nq; i++) out_ref_err = fmax(out_ref_err, fabs(from_bf16(o16[i]) - p.out[i]));
    CHECK(out_ref_err < 0.05, "%s: the bf16 kernel's out is %.3g from float64", name, out_ref_err);
    CHECK(fwd_bytes == ct_cp_expected_bytes(&cp, false, true) && all_bytes == ct_cp_expected_bytes(&cp, true, true),
          "%s: moved %.0f / %.0f bytes, expected %.0f / %.0f", name, fwd_bytes, all_bytes,
          ct_cp_expected_bytes(&cp, false, true), ct_cp_expected_bytes(&cp, true, true));
    ct_cp_free(&cp);
    free(q16), free(k16), free(v16), free(o16), free(lse1), free(dq1), free(dk1), free(dv1), free(scr1);
    free(pos), free(qkv), free(out), free(dqkv), free(lse), free(dout), free(scratch);
    free_problem(&p);
}

static void test_cp_allgather_bf16(void) {
    for (int bal = 0; bal < 2; bal++) {
        one_case_bf16(&world, (ct_cp_balance)bal, 2, 24, 4, 2, 5);
        one_case_bf16(&world, (ct_cp_balance)bal, 2, 264, 4, 2, 5);
        one_case_bf16(&world, (ct_cp_balance)bal, 1, 200, 4, 1, 64);
    }
}

static void test_cp_matches_full_attention(void) {
    ct_group cpg;
    CHECK(ct_comm_group_split(&world, 0, world.rank, "cp", &cpg) == CT_OK, "%s", ct_last_error());
    all_cases(&cpg);
    ct_comm_group_free(&cpg);
}

// Two cp groups of 2 (ranks {0,1} and {2,3}) running at once, as beside a data-parallel dim.
static void test_cp_groups_of_two(void) {
    if (world.size % 2) return;
    ct_group cpg;
    CHECK(ct_comm_group_split(&world, world.rank / 2, world.rank, "cp", &cpg) == CT_OK, "%s", ct_last_error());
    all_cases(&cpg);
    ct_comm_group_free(&cpg);
}

// ---- pure cases ---------------------------------------------------------------------------------

static void test_positions(void) {
    int32_t pos[24];
    ct_cp_positions(CT_CP_HEADTAIL, 0, 2, 8, pos);
    CHECK(pos[0] == 0 && pos[1] == 1 && pos[2] == 6 && pos[3] == 7, "headtail r0: %d %d %d %d", pos[0], pos[1],
          pos[2], pos[3]);
    ct_cp_positions(CT_CP_HEADTAIL, 1, 2, 8, pos);
    CHECK(pos[0] == 2 && pos[1] == 3 && pos[2] == 4 && pos[3] == 5, "headtail r1");
    ct_cp_positions(CT_CP_CONTIGUOUS, 1, 2, 8, pos);
    CHECK(pos[0] == 4 && pos[3] == 7, "contiguous r1");
    // every layout is a partition of 0..T-1
    for (int bal = 0; bal < 2; bal++)
        for (int P = 1; P <= 4; P++) {
            const long T = 24;  // splits into 2cp chunks for cp 1..4
            int seen[24] = {0};
            for (int r = 0; r < P; r++) {
                ct_cp_positions((ct_cp_balance)bal, r, P, T, pos);
                for (long i = 0; i < T / P; i++) seen[pos[i]]++;
            }
            for (long i = 0; i < T; i++)
                CHECK(seen[i] == 1, "balance %d cp %d: position %ld held %d times", bal, P, i, seen[i]);
        }
}

static void test_seq_len_refusals(void) {
    CHECK(ct_cp_check_seq_len(CT_CP_HEADTAIL, 4, 100) == CT_ERR, "100 at cp 4 accepted");
    CHECK(strcmp(ct_last_error(), "training.seq_len 100 does not split into 2 x context_extension_degree 4 = 8 equal "
                                  "chunks (head-tail balancing); use a multiple of 8") == 0, "message: %s",
          ct_last_error());
    CHECK(strchr(ct_last_error(), '\n') == NULL, "one line");
    CHECK(ct_cp_check_seq_len(CT_CP_HEADTAIL, 4, 96) == CT_OK, "96 at cp 4");
    CHECK(ct_cp_check_seq_len(CT_CP_CONTIGUOUS, 4, 100) == CT_OK, "100 contiguous at cp 4");
    CHECK(ct_cp_check_seq_len(CT_CP_CONTIGUOUS, 4, 102) == CT_ERR && strstr(ct_last_error(), "multiple of 4"), "%s",
          ct_last_error());
    CHECK(ct_cp_check_seq_len(CT_CP_HEADTAIL, 2, 0) == CT_ERR, "T 0");
    // cp 1 splits nothing: an odd length is accepted under either balancer, and 0 still refused
    CHECK(ct_cp_check_seq_len(CT_CP_HEADTAIL, 1, 1023) == CT_OK, "odd 1023 at cp 1 refused: %s", ct_last_error());
    CHECK(ct_cp_check_seq_len(CT_CP_CONTIGUOUS, 1, 7) == CT_OK, "7 contiguous at cp 1 refused: %s", ct_last_error());
    CHECK(ct_cp_check_seq_len(CT_CP_HEADTAIL, 1, 0) == CT_ERR && strstr(ct_last_error(), "at least 1"), "T 0 at cp 1: %s",
          ct_last_error());
    CHECK(ct_cp_check_seq_len(CT_CP_HEADTAIL, 2, 1023) == CT_ERR && strstr(ct_last_error(), "multiple of 4"),
          "odd 1023 at cp 2: %s", ct_last_error());
    // the trainer's set-up takes the same check: an odd training.seq_len runs without cp
    ct_config cfg;
    ct_config_defaults(&cfg);
    cfg.seq_len = 1023;
    ct_parallel_dims dims;
    CHECK(ct_parallelize_dims(&cfg, 1, 1, &dims) == CT_OK && dims.seq_local == 1023, "seq_len 1023 at cp 1: %s",
          ct_last_error());
    CHECK(ct_parallelize_dims(&cfg, 1, 2, &dims) == CT_ERR && strstr(ct_last_error(), "training.seq_len 1023"),
          "seq_len 1023 at cp 2 accepted");
    // planning refuses the same lengths, and NH not a multiple of NKV, before any communication
    ct_group fake;
    memset(&fake, 0, sizeof fake);
    fake.size = 2;
    ct_cp cp;
    CHECK(ct_cp_init(&cp, kern, &fake, CT_CP_RING, CT_CP_HEADTAIL, 1, 10, 4, 2, 8) == CT_ERR &&
              strstr(ct_last_error(), "multiple of 4"), "%s", ct_last_error());
    CHECK(ct_cp_init(&cp, kern, &fake, CT_CP_RING, CT_CP_HEADTAIL, 1, 16, 4, 3, 8) == CT_ERR &&
              strstr(ct_last_error(), "NKV"), "%s", ct_last_error());
}

// The merge against its definition in float64, with rows where either side saw no key.
static void test_merge(void) {
    const long B = 2, C = 3, NH = 2, HS = 3, n = B * C * NH * HS, nl = B * NH * C;
    float o[36], l[12], op[36], lp[12];
    double want_o[36], want_l[12];
    rng_state = 5;
    for (long i = 0; i < n; i++) o[i] = frand(1), op[i] = frand(1);
    for (long i = 0; i < nl; i++) l[i] = frand(30), lp[i] = frand(30);
    l[1] = -INFINITY, lp[2] = -INFINITY, l[3] = lp[3] = -INFINITY;
    for (long b = 0; b < B; b++)
        for (long t = 0; t < C; t++)
            for (long h = 0; h < NH; h++) {
                const long li = (b * NH + h) * C + t, oi = ((b * C + t) * NH + h) * HS;
                if (l[li] == -INFINITY) {
                    for (long d = 0; d < HS; d++) o[oi + d] = 0;  // what the kernel leaves in such rows
                }
                const double L = l[li] == -INFINITY && lp[li] == -INFINITY
                                     ? -INFINITY
                                     : log(exp((double)l[li]) + exp((double)lp[li]));
                want_l[li] = L;
                for (long d = 0; d < HS; d++)
                    want_o[oi + d] = L == -INFINITY ? 0
                                                    : exp(l[li] - L) * (l[li] == -INFINITY ? 0 : o[oi + d]) +
                                                          exp(lp[li] - L) * (lp[li] == -INFINITY ? 0 : op[oi + d]);
            }
    ct_kernels_get("cpu")->attention_merge(o, l, op, lp, B, C, NH, HS);
    for (long i = 0; i < nl; i++)
        CHECK(want_l[i] == -INFINITY ? l[i] == -INFINITY : fabs(l[i] - want_l[i]) < 1e-5 * (1 + fabs(want_l[i])),
              "lse[%ld] %g want %g", i, l[i], want_l[i]);
    for (long i = 0; i < n; i++) CHECK(fabs(o[i] - want_o[i]) < 1e-6, "o[%ld] %g want %g", i, o[i], want_o[i]);
}

static void test_expected_bytes_and_group_of_one(void) {
    ct_group fake;
    memset(&fake, 0, sizeof fake);
    fake.size = 4;
    // the formulas need only the plan, not a connected group
    ct_cp cp = {.group = &fake, .B = 2, .T = 64, .T_local = 16, .NKV = 2, .HS = 8, .rotate = CT_CP_RING};
    const double S = 2.0 * 2 * 16 * 2 * 8 * 4;
    CHECK(ct_cp_expected_bytes(&cp, false, false) == 6 * S && ct_cp_expected_bytes(&cp, true, false) == 20 * S,
          "ring %g %g", ct_cp_expected_bytes(&cp, false, false) / S, ct_cp_expected_bytes(&cp, true, false) / S);
    cp.rotate = CT_CP_ALLGATHER;
    CHECK(ct_cp_expected_bytes(&cp, false, false) == 3 * S && ct_cp_expected_bytes(&cp, true, false) == 9 * S,
          "allgather");
    CHECK(ct_cp_expected_bytes(&cp, false, true) == 1.5 * S && ct_cp_expected_bytes(&cp, true, true) == 6 * S,
          "allgather, K|V gathered in bf16");
    // a group of one: nothing planned, the table keeps the local attention
    fake.size = 1;
    CHECK(ct_cp_init(&cp, kern, &fake, CT_CP_RING, CT_CP_HEADTAIL, 2, 16, 4, 2, 8) == CT_OK, "%s", ct_last_error());
    ct_stage_ops ops = ct_stage_ops_local(kern), before = ops;
    ct_cp_apply(&cp, &ops);
    CHECK(memcmp(&ops.attention, &before.attention, sizeof ops.attention) == 0, "group of one changed the table");
    CHECK(ct_cp_expected_bytes(&cp, true, false) == 0, "group of one moves bytes");
    ct_cp_free(&cp);
}

int main(int argc, char **argv) {
    kern = ct_kernels_get("cpu");
    if (!ct_mpi_test_is_child(argc, argv)) {
        CT_RUN(test_positions);
        CT_RUN(test_seq_len_refusals);
        CT_RUN(test_merge);
        CT_RUN(test_expected_bytes_and_group_of_one);
        const int nps[2] = {2, 4}, threads[2] = {2, 1};
        for (int i = 0; i < 2; i++) {
            char t[8];
            snprintf(t, sizeof t, "%d", threads[i]);
            setenv("OMP_NUM_THREADS", t, 1);
            int rc = ct_mpi_test_spawn(argv[0], nps[i], 300, NULL);
            if (rc != 0) {
                printf("FAIL mpirun_np%d: exit %d\n", nps[i], rc);
                ct_test_failures++;
            }
        }
        CT_TEST_EXIT();
    }
    if (ct_comm_init(&argc, &argv) != CT_OK || ct_comm_group_world(&world, 30) != CT_OK) {
        printf("FAIL init: %s\n", ct_last_error());
        return 1;
    }
    CT_MPI_RUN(test_cp_matches_full_attention);
    CT_MPI_RUN(test_cp_allgather_bf16);
    if (world.size == 4) CT_MPI_RUN(test_cp_groups_of_two);
    ct_comm_group_free(&world);
    ct_comm_finalize();
    CT_TEST_EXIT();
}
