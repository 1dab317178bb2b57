// Attention forward and backward against a naive float64 reference (full score matrix, softmax,
// analytic gradients), itself checked against finite differences on a tiny case. Shapes cover
// T = 1, 7, 65, 130 (not multiples of the 64-row tiles), HS = 16/24/64 and odd-sized random ones,
// GQA ratios 4/4, 4/2, 8/1, token strides wider than the heads (fused qkv), and chunked
// queries/keys with positions (context parallel) including rows and whole chunks that see no key;
// bitwise the same results on 1, 2 and 3 threads. Document ids (block_causal): the reference
// masks keys of other documents; documents that start mid-tile, key tiles skipped whole, a query
// tile all of whose key tiles are skipped, zig-zag positions with documents, and documents that
// are all one (bitwise the causal result).
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "test.h"
#include "test_rand.h"


typedef struct {
    long B, Tq, Tk, NH, NKV, HS;
    int fused;           // q, k, v live in one (B, T, (NH + 2 NKV) HS) buffer (requires Tq == Tk)
    int32_t *qp, *kp;    // positions or NULL
    int32_t *qd, *kd;    // document ids (B, Tq), (B, Tk) or NULL
} att_case;

// reference: out, lse, and the gradients of sum(out * dout) in double
static void reference(const att_case *c, const float *q, long ldq, const float *k, long ldk, const float *v, long ldv,
                      const float *dout, double *out, double *lse, double *dq, double *dk, double *dv) {
    long B = c->B, Tq = c->Tq, Tk = c->Tk, NH = c->NH, HS = c->HS, grp = c->NH / c->NKV;
    double scale = 1.0 / sqrt((double)HS);
    double *p = malloc(sizeof(double) * Tk), *dp = malloc(sizeof(double) * Tk);
    for (long b = 0; b < B; b++)
        for (long h = 0; h < NH; h++) {
            long g = h / grp;
            for (long i = 0; i < Tq; i++) {
                long qpos = c->qp ? c->qp[i] : i;
                const float *qi = q + (b * Tq + i) * ldq + h * HS;
                double mx = -INFINITY;
                for (long j = 0; j < Tk; j++) {
                    long kpos = c->kp ? c->kp[j] : j;
                    if (kpos > qpos || (c->qd && c->qd[b * Tq + i] != c->kd[b * Tk + j])) {
                        p[j] = -INFINITY;
                        continue;
                    }
                    const float *kj = k + (b * Tk + j) * ldk + g * HS;
                    double s = 0;
                    for (long d = 0; d < HS; d++) s += (double)qi[d] * kj[d];
                    p[j] = s * scale;
                    if (p[j] > mx) mx = p[j];
                }
                double *oi = out + ((b * Tq + i) * NH + h) * HS;
                double *L = lse + (b * NH + h) * Tq + i;
                for (long d = 0; d < HS; d++) oi[d] = 0;
                if (mx == -INFINITY) {
                    *L = -INFINITY;
                    continue;
                }
                double sum = 0;
                for (long j = 0; j < Tk; j++) sum += p[j] == -INFINITY ? 0 : exp(p[j] - mx);
                *L = mx + log(sum);
                for (long j = 0; j < Tk; j++) p[j] = p[j] == -INFINITY ? 0 : exp(p[j] - *L);
                for (long j = 0; j < Tk; j++)
                    for (long d = 0; d < HS; d++) oi[d] += p[j] * v[(b * Tk + j) * ldv + g * HS + d];
                if (!dq) continue;
                // backward of this row: dP_j = dO . v_j, dS_j = p_j (dP_j - sum_l p_l dP_l)
                const float *doi = dout + ((b * Tq + i) * NH + h) * HS;
                double pdp = 0;
                for (long j = 0; j < Tk; j++) {
                    double s = 0;
                    for (long d = 0; d < HS; d++) s += (double)doi[d] * v[(b * Tk + j) * ldv + g * HS + d];
                    dp[j] = s;
                    pdp += p[j] * s;
                }
                for (long j = 0; j < Tk; j++) {
                    if (p[j] == 0) continue;
                    double ds = p[j] * (dp[j] - pdp) * scale;
                    for (long d = 0; d < HS; d++) {
                        dq[(b * Tq + i) * ldq + h * HS + d] += ds * k[(b * Tk + j) * ldk + g * HS + d];
                        dk[(b * Tk + j) * ldk + g * HS + d] += ds * qi[d];
                        dv[(b * Tk + j) * ldv + g * HS + d] += p[j] * doi[d];
                    }
                }
            }
        }
    free(p);
    free(dp);
}

// max |a - b| over the head columns of strided rows, relative to max |b| (floored at 1e-3: with
// inputs of order 1, a gradient that is exactly 0 in double, like dq at T = 1, is rounding noise)
static double strided_err(const float *a, const float *a0, const double *ref, long rows, long ld, long off, long width) {
    double maxd = 0, maxb = 1e-3;
    for (long r = 0; r < rows; r++)
        for (long x = 0; x < width; x++) {
            long i = r * ld + off + x;
            double got = (double)a[i] - (a0 ? (double)a0[i] : 0.0);
            double d = fabs(got - ref[i]);
            if (isnan(d)) d = INFINITY;
            if (d > maxd) maxd = d;
            if (fabs(ref[i]) > maxb) maxb = fabs(ref[i]);
        }
    return maxd / maxb;
}

static void run_case(const att_case *c, const char *name) {
    long B = c->B, Tq = c->Tq, Tk = c->Tk, NH = c->NH, NKV = c->NKV, HS = c->HS;
    long ldq, ldk, ldv, nq, nk;
    float *qb, *kb, *vb, *dqb, *dkb, *dvb;
    long w = (NH + 2 * NKV) * HS;
    if (c->fused) {
        ldq = ldk = ldv = w;
        nq = nk = B * Tq * w;
    } else {
        ldq = NH * HS + 3;  // strides wider than the heads
        ldk = NKV * HS + 5;
        ldv = NKV * HS;
        nq = B * Tq * ldq;
        nk = B * Tk * (ldk > ldv ? ldk : ldv);
    }
    float *buf = malloc(sizeof(float) * (nq + 2 * nk) * 2);
    for (long i = 0; i < (nq + 2 * nk) * 2; i++) buf[i] = frand(1.0f);
    float *init = malloc(sizeof(float) * (nq + 2 * nk));  // initial gradients (the kernel adds to them)
    if (c->fused) {
        qb = buf;
        kb = buf + NH * HS;
        vb = buf + (NH + NKV) * HS;
        dqb = buf + nq;
        dkb = dqb + NH * HS;
        dvb = dqb + (NH + NKV) * HS;
        memcpy(init, dqb, sizeof(float) * nq);
    } else {
        qb = buf;
        kb = buf + nq;
        vb = kb + nk;
        dqb = vb + nk;
        dkb = dqb + nq;
        dvb = dkb + nk;
        memcpy(init, dqb, sizeof(float) * (nq + 2 * nk));
    }
    long no = B * Tq * NH * HS;
    float *out = malloc(sizeof(float) * no), *lse = malloc(sizeof(float) * B * NH * Tq);
    float *dout = malloc(sizeof(float) * no);
    for (long i = 0; i < no; i++) dout[i] = frand(1.0f);
    float *scratch = malloc(sizeof(float) * ct_attention_scratch_floats(Tq, Tk, HS));

    // reference in double; gradient arrays laid out like the float buffers (zeros)
    long nall = c->fused ? nq : nq + 2 * nk;
    double *rout = calloc(no, sizeof(double)), *rlse = calloc(B * NH * Tq, sizeof(double));
    double *rgrad = calloc(nall, sizeof(double));
    double *rdq = rgrad, *rdk, *rdv;
    if (c->fused) {
        rdk = rgrad + NH * HS;
        rdv = rgrad + (NH + NKV) * HS;
    } else {
        rdk = rgrad + nq;
        rdv = rdk + nk;
    }
    reference(c, qb, ldq, kb, ldk, vb, ldv, dout, rout, rlse, rdq, rdk, rdv);

    ct_attention_forward(out, lse, qb, ldq, kb, ldk, vb, ldv, c->qp, c->kp, c->qd, c->kd, B, Tq, Tk, NH, NKV, HS, scratch);
    double e_out = ct_test_max_rel_err(out, rout, no);
    CHECK(e_out < 1e-5, "%s: out rel err %.3g", name, e_out);
    for (long i = 0; i < B * NH * Tq; i++) {
        if (rlse[i] == -INFINITY) {
            CHECK(lse[i] == -INFINITY, "%s: lse[%ld] = %g, want -inf", name, i, lse[i]);
        } else {
            CHECK_CLOSE(lse[i], rlse[i], 1e-5, 1e-5);
        }
    }

    ct_attention_backward(dqb, dkb, dvb, dout, out, lse, qb, ldq, kb, ldk, vb, ldv, c->qp, c->kp, c->qd, c->kd, B, Tq, Tk, NH, NKV,
                          HS, scratch);
    const float *i_dq = c->fused ? init : init, *i_dk = c->fused ? init + NH * HS : init + nq;
    const float *i_dv = c->fused ? init + (NH + NKV) * HS : init + nq + nk;
    // the gradient buffers' offsets relative to `init` mirror those relative to dqb
    double e_dq = strided_err(dqb, i_dq, rdq, B * Tq, ldq, 0, NH * HS);
    double e_dk = strided_err(dkb, i_dk, rdk, B * Tk, ldk, 0, NKV * HS);
    double e_dv = strided_err(dvb, i_dv, rdv, B * Tk, ldv, 0, NKV * HS);
    CHECK(e_dq < 1e-4 && e_dk < 1e-4 && e_dv < 1e-4, "%s: grad rel err dq %.3g dk %.3g dv %.3g", name, e_dq, e_dk,
          e_dv);
    // bytes beyond the head columns (padding of wide strides) must be untouched
    if (!c->fused)
        for (long r = 0; r < B * Tq; r++)
            for (long x = NH * HS; x < ldq; x++) CHECK(dqb[r * ldq + x] == i_dq[r * ldq + x], "%s: dq pad", name);

    // determinism: the same call again gives bitwise the same results
    float *out2 = malloc(sizeof(float) * no), *lse2 = malloc(sizeof(float) * B * NH * Tq);
    ct_attention_forward(out2, lse2, qb, ldq, kb, ldk, vb, ldv, c->qp, c->kp, c->qd, c->kd, B, Tq, Tk, NH, NKV, HS, scratch);
    CHECK(memcmp(out, out2, sizeof(float) * no) == 0, "%s: forward not reproducible", name);
    float *g1 = malloc(sizeof(float) * nall);
    memcpy(g1, dqb, sizeof(float) * nall);
    memcpy(dqb, init, sizeof(float) * nall);
    ct_attention_backward(dqb, dkb, dvb, dout, out, lse, qb, ldq, kb, ldk, vb, ldv, c->qp, c->kp, c->qd, c->kd, B, Tq, Tk, NH, NKV,
                          HS, scratch);
    CHECK(memcmp(g1, dqb, sizeof(float) * nall) == 0, "%s: backward not reproducible", name);
    for (long i = 0; i < nall; i++) CHECK(!isnan(dqb[i]), "%s: NaN in gradients at %ld", name, i);

    free(buf), free(init), free(out), free(lse), free(dout), free(scratch), free(rout), free(rlse), free(rgrad);
    free(out2), free(lse2), free(g1);
}

static int32_t *range_pos(long n, long start) {
    int32_t *p = malloc(sizeof(int32_t) * n);
    for (long i = 0; i < n; i++) p[i] = (int32_t)(start + i);
    return p;
}

static void test_attention_causal_shapes(void) {
    att_case cs[] = {
        {1, 1, 1, 4, 4, 16, 0, NULL, NULL, NULL, NULL},   {2, 7, 7, 4, 2, 16, 0, NULL, NULL, NULL, NULL},
        {1, 65, 65, 8, 1, 24, 0, NULL, NULL, NULL, NULL}, {2, 130, 130, 4, 4, 64, 1, NULL, NULL, NULL, NULL},
        {1, 130, 130, 4, 2, 64, 0, NULL, NULL, NULL, NULL}, {3, 64, 64, 8, 1, 2, 1, NULL, NULL, NULL, NULL},
    };
    char name[64];
    for (unsigned i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        snprintf(name, sizeof name, "causal case %u", i);
        run_case(&cs[i], name);
    }
}

static void test_attention_random_shapes(void) {
    static const long ratios[3][2] = {{4, 4}, {4, 2}, {8, 1}};
    char name[96];
    for (int r = 0; r < 4; r++) {
        att_case c = {0};
        c.B = 1 + (long)(urand() * 2);
        c.Tq = c.Tk = 1 + (long)(urand() * 150);
        int ri = (int)(urand() * 3);
        c.NH = ratios[ri][0];
        c.NKV = ratios[ri][1];
        c.HS = 2 * (1 + (long)(urand() * 40));
        c.fused = urand() < 0.5;
        snprintf(name, sizeof name, "random B=%ld T=%ld NH=%ld NKV=%ld HS=%ld fused=%d", c.B, c.Tq, c.NH, c.NKV, c.HS,
                 c.fused);
        run_case(&c, name);
    }
}

// Context-parallel chunks: queries and keys at explicit positions, Tq != Tk.
static void test_attention_positions(void) {
    att_case c = {1, 70, 130, 4, 2, 16, 0, NULL, NULL, NULL, NULL};
    c.qp = range_pos(70, 60), c.kp = range_pos(130, 0);  // last chunk of queries over all keys
    run_case(&c, "queries 60..129 over keys 0..129");
    free(c.qp), free(c.kp);

    att_case d = {2, 70, 100, 8, 1, 24, 0, NULL, NULL, NULL, NULL};
    d.qp = range_pos(70, 0), d.kp = range_pos(100, 30);  // rows 0..29 see no key
    run_case(&d, "queries 0..69 over keys 30..129");
    free(d.qp), free(d.kp);

    att_case e = {1, 40, 100, 4, 4, 16, 0, NULL, NULL, NULL, NULL};
    e.qp = range_pos(40, 0), e.kp = range_pos(100, 64);  // the whole query chunk sees no key
    run_case(&e, "queries 0..39 over keys 64..163 (none visible)");
    free(e.qp), free(e.kp);

    att_case z = {1, 64, 64, 4, 2, 16, 0, NULL, NULL, NULL, NULL};  // zig-zag: two non-adjacent position runs
    z.qp = malloc(sizeof(int32_t) * 64), z.kp = malloc(sizeof(int32_t) * 64);
    for (int i = 0; i < 32; i++) z.qp[i] = z.kp[i] = i, z.qp[32 + i] = z.kp[32 + i] = 96 + i;
    run_case(&z, "zig-zag positions 0..31 + 96..127");
    free(z.qp), free(z.kp);
}

// Forward and backward on 1, 2 and 3 threads (omp_set_num_threads inside the test; scratch sized
// for the most): bitwise the same out, lse, dq, dk and dv. The backward hands out (batch, head,
// query tile) items and adds their dK / dV shares in a fixed order, whatever thread runs them.
static void thread_count_case(const att_case *c, const char *name) {
    long B = c->B, Tq = c->Tq, Tk = c->Tk, NH = c->NH, NKV = c->NKV, HS = c->HS;
    long ldq = NH * HS, ldk = NKV * HS, ldv = NKV * HS + 1;
    long nq = B * Tq * ldq, nk = B * Tk * ldk, nv = B * Tk * ldv, no = B * Tq * NH * HS, nl = B * NH * Tq;
    float *q = malloc(sizeof(float) * nq), *k = malloc(sizeof(float) * nk), *v = malloc(sizeof(float) * nv);
    float *dout = malloc(sizeof(float) * no), *g0 = malloc(sizeof(float) * (nq + nk + nv));
    for (long i = 0; i < nq; i++) q[i] = frand(2.0f);
    for (long i = 0; i < nk; i++) k[i] = frand(2.0f);
    for (long i = 0; i < nv; i++) v[i] = frand(1.0f);
    for (long i = 0; i < no; i++) dout[i] = frand(1.0f);
    for (long i = 0; i < nq + nk + nv; i++) g0[i] = frand(0.1f);  // the kernel adds to the gradients
    int saved = omp_get_max_threads();
    omp_set_num_threads(3);
    float *scratch = malloc(sizeof(float) * ct_attention_scratch_floats(Tq, Tk, HS));
    float *res[3];
    size_t bytes = sizeof(float) * (no + nl + nq + nk + nv);
    for (int t = 0; t < 3; t++) {
        omp_set_num_threads(t + 1);
        float *r = res[t] = malloc(bytes);
        float *out = r, *lse = out + no, *g = lse + nl;
        memcpy(g, g0, sizeof(float) * (nq + nk + nv));
        ct_attention_forward(out, lse, q, ldq, k, ldk, v, ldv, c->qp, c->kp, c->qd, c->kd, B, Tq, Tk, NH, NKV, HS, scratch);
        ct_attention_backward(g, g + nq, g + nq + nk, dout, out, lse, q, ldq, k, ldk, v, ldv, c->qp, c->kp, c->qd, c->kd, B, Tq,
                              Tk, NH, NKV, HS, scratch);
    }
    omp_set_num_threads(saved);
    CHECK(memcmp(res[0], res[1], bytes) == 0, "%s: 1 and 2 threads differ", name);
    CHECK(memcmp(res[0], res[2], bytes) == 0, "%s: 1 and 3 threads differ", name);
    free(q), free(k), free(v), free(dout), free(g0), free(scratch), free(res[0]), free(res[1]), free(res[2]);
}

static void test_attention_thread_count_invariance(void) {
    att_case a = {3, 200, 200, 4, 2, 32, 0, NULL, NULL, NULL, NULL};
    thread_count_case(&a, "B=3 T=200 NH=4 NKV=2 HS=32");
    att_case b = {2, 256, 256, 8, 1, 64, 0, NULL, NULL, NULL, NULL};
    thread_count_case(&b, "B=2 T=256 NH=8 NKV=1 HS=64");
    att_case z = {2, 128, 192, 4, 4, 16, 0, NULL, NULL, NULL, NULL};  // zig-zag query positions over all keys
    z.qp = malloc(sizeof(int32_t) * 128), z.kp = range_pos(192, 0);
    for (int i = 0; i < 64; i++) z.qp[i] = i, z.qp[64 + i] = 128 + i;
    thread_count_case(&z, "zig-zag queries 0..63 + 128..191 over keys 0..191");
    free(z.qp), free(z.kp);
}

// A scratch sized for more keys than the call has (as for a KV cache, or past the size where the
// backward's per-thread copy of dK / dV rows is not kept) must still hold the call's tiles and
// copies: the same bits as a scratch sized for the call. Grouped queries on two threads, so the
// backward takes whole kv heads with the copy. (Under SANITIZE=1 an overrun is caught here.)
static void test_attention_scratch_sized_for_more_keys(void) {
    const long B = 2, T = 256, NH = 4, NKV = 2, HS = 64, ldq = NH * HS, ldk = NKV * HS, ldv = NKV * HS;
    long nq = B * T * ldq, nk = B * T * ldk, no = B * T * NH * HS, nl = B * NH * T;
    float *q = malloc(sizeof(float) * nq), *k = malloc(sizeof(float) * nk), *v = malloc(sizeof(float) * nk);
    float *dout = malloc(sizeof(float) * no), *out = malloc(sizeof(float) * no), *lse = malloc(sizeof(float) * nl);
    for (long i = 0; i < nq; i++) q[i] = frand(2.0f);
    for (long i = 0; i < nk; i++) k[i] = frand(2.0f), v[i] = frand(1.0f);
    for (long i = 0; i < no; i++) dout[i] = frand(1.0f);
    int saved = omp_get_max_threads();
    omp_set_num_threads(2);
    const long sized_for[] = {T, 1000, 2100, 8192};
    float *g[4];
    for (int s = 0; s < 4; s++) {
        float *scratch = malloc(sizeof(float) * ct_attention_scratch_floats(T, sized_for[s], HS));
        g[s] = calloc((size_t)(nq + 2 * nk), sizeof(float));
        ct_attention_forward(out, lse, q, ldq, k, ldk, v, ldv, NULL, NULL, NULL, NULL, B, T, T, NH, NKV, HS, scratch);
        ct_attention_backward(g[s], g[s] + nq, g[s] + nq + nk, dout, out, lse, q, ldq, k, ldk, v, ldv, NULL, NULL, NULL, NULL, B,
                              T, T, NH, NKV, HS, scratch);
        free(scratch);
    }
    omp_set_num_threads(saved);
    for (int s = 1; s < 4; s++)
        CHECK(memcmp(g[0], g[s], sizeof(float) * (size_t)(nq + 2 * nk)) == 0,
              "scratch sized for %ld keys: gradients differ from one sized for the call's %ld", sized_for[s], T);
    free(q), free(k), free(v), free(dout), free(out), free(lse);
    for (int s = 0; s < 4; s++) free(g[s]);
}

// The analytic reference gradients agree with float64 central differences of sum(out * dout).
static void test_attention_reference_vs_finite_differences(void) {
    att_case c = {1, 5, 5, 2, 1, 4, 0, NULL, NULL, NULL, NULL};
    long ldq = 8, ldk = 4, ldv = 4;
    float q[40], k[20], v[20], dout[40];
    for (int i = 0; i < 40; i++) q[i] = frand(1), dout[i] = frand(1);
    for (int i = 0; i < 20; i++) k[i] = frand(1), v[i] = frand(1);
    double out[40], lse[10], dq[40] = {0}, dk[20] = {0}, dv[20] = {0};
    reference(&c, q, ldq, k, ldk, v, ldv, dout, out, lse, dq, dk, dv);
    float *arrs[3] = {q, k, v};
    double *grads[3] = {dq, dk, dv};
    int lens[3] = {40, 20, 20};
    for (int a = 0; a < 3; a++)
        for (int i = 0; i < lens[a]; i++) {
            float save = arrs[a][i];
            double f[2];
            for (int sgn = 0; sgn < 2; sgn++) {
                // float inputs: a step of 2^-10 is exact, so the difference quotient is clean
                arrs[a][i] = save + (sgn ? 1 : -1) * 0.0009765625f;
                double o[40], l[10];
                reference(&c, q, ldq, k, ldk, v, ldv, dout, o, l, NULL, NULL, NULL);
                f[sgn] = 0;
                for (int x = 0; x < 40; x++) f[sgn] += o[x] * dout[x];
            }
            arrs[a][i] = save;
            double fd = (f[1] - f[0]) / (2 * 0.0009765625);
            CHECK_CLOSE(grads[a][i], fd, 1e-4, 1e-5);
        }
}

// Tensor parallel splits the heads between ranks: each rank calls the kernels on its query heads
// and their kv heads, with its own (narrower) row strides. Every item (batch, head, query tile)
// and every kv head's ordered adds are the same work either way, so the outputs and gradients of
// two half calls are bitwise those of the whole call -- what lets the parity tests put every
// tensor-parallel difference down to tp's own reductions (tests/parity.h).
static void test_attention_head_split_bitwise(void) {
    const long B = 2, T = 150, NH = 8, NKV = 4, HS = 48, H2 = NH / 2, KV2 = NKV / 2;
    const long ld = (NH + 2 * NKV) * HS, ld2 = (H2 + 2 * KV2) * HS;  // fused qkv rows, whole and half
    float *qkv = malloc(sizeof(float) * B * T * ld), *g = malloc(sizeof(float) * B * T * ld);
    float *out = malloc(sizeof(float) * B * T * NH * HS), *lse = malloc(sizeof(float) * B * NH * T);
    float *dout = malloc(sizeof(float) * B * T * NH * HS);
    float *q2 = malloc(sizeof(float) * B * T * ld2), *g2 = malloc(sizeof(float) * B * T * ld2);
    float *o2 = malloc(sizeof(float) * B * T * H2 * HS), *l2 = malloc(sizeof(float) * B * H2 * T);
    float *do2 = malloc(sizeof(float) * B * T * H2 * HS);
    float *scratch = malloc(sizeof(float) * ct_attention_scratch_floats(T, T, HS));
    for (long i = 0; i < B * T * ld; i++) qkv[i] = frand(2.0f), g[i] = 0.0f;
    for (long i = 0; i < B * T * NH * HS; i++) dout[i] = frand(1.0f);
    ct_attention_forward(out, lse, qkv, ld, qkv + NH * HS, ld, qkv + (NH + NKV) * HS, ld, NULL, NULL, NULL, NULL, B, T, T, NH,
                         NKV, HS, scratch);
    ct_attention_backward(g, g + NH * HS, g + (NH + NKV) * HS, dout, out, lse, qkv, ld, qkv + NH * HS, ld,
                          qkv + (NH + NKV) * HS, ld, NULL, NULL, NULL, NULL, B, T, T, NH, NKV, HS, scratch);
    long differ = 0;
    for (long r = 0; r < 2; r++) {  // rank r: query heads [r H2, (r + 1) H2), kv heads [r KV2, (r + 1) KV2)
        // the rank's rows: [its q | its k | its v] (and their gradients), and its dout
        const long part[3][3] = {{r * H2 * HS, 0, H2 * HS},
                                 {(NH + r * KV2) * HS, H2 * HS, KV2 * HS},
                                 {(NH + NKV + r * KV2) * HS, (H2 + KV2) * HS, KV2 * HS}};
        for (long t = 0; t < B * T; t++) {
            for (int p = 0; p < 3; p++)
                for (long j = 0; j < part[p][2]; j++) q2[t * ld2 + part[p][1] + j] = qkv[t * ld + part[p][0] + j];
            for (long j = 0; j < H2 * HS; j++) do2[t * H2 * HS + j] = dout[t * NH * HS + r * H2 * HS + j];
        }
        for (long i = 0; i < B * T * ld2; i++) g2[i] = 0.0f;
        ct_attention_forward(o2, l2, q2, ld2, q2 + H2 * HS, ld2, q2 + (H2 + KV2) * HS, ld2, NULL, NULL, NULL, NULL, B, T, T, H2,
                             KV2, HS, scratch);
        ct_attention_backward(g2, g2 + H2 * HS, g2 + (H2 + KV2) * HS, do2, o2, l2, q2, ld2, q2 + H2 * HS, ld2,
                              q2 + (H2 + KV2) * HS, ld2, NULL, NULL, NULL, NULL, B, T, T, H2, KV2, HS, scratch);
        for (long t = 0; t < B * T; t++) {
            differ += memcmp(o2 + t * H2 * HS, out + t * NH * HS + r * H2 * HS, sizeof(float) * H2 * HS) != 0;
            for (int p = 0; p < 3; p++)  // dq, dk, dv
                differ += memcmp(g2 + t * ld2 + part[p][1], g + t * ld + part[p][0], sizeof(float) * part[p][2]) != 0;
            for (long h = 0; h < H2; h++)
                differ += memcmp(l2 + (t / T * H2 + h) * T + t % T, lse + (t / T * NH + r * H2 + h) * T + t % T,
                                 sizeof(float)) != 0;
        }
    }
    CHECK(differ == 0, "%ld rows of out, lse, dq, dk or dv differ between the whole call and two half calls", differ);
    free(qkv), free(g), free(out), free(lse), free(dout), free(q2), free(g2), free(o2), free(l2), free(do2);
    free(scratch);
}

// Document ids for B sequences of T tokens: a new document after each "EOS", drawn with
// probability p at each token (and forced at the rows listed in at, for every sequence).
static int32_t *make_docs(long B, long T, double p, const long *at, int n_at) {
    int32_t *d = malloc(sizeof(int32_t) * B * T);
    for (long b = 0; b < B; b++) {
        int32_t id = 0;
        for (long i = 0; i < T; i++) {
            for (int a = 0; a < n_at; a++) id += i == at[a];
            d[b * T + i] = id;
            if (urand() < p) id++;
        }
    }
    return d;
}

// The rows of docs at the given positions (the ids a context-parallel chunk holds).
static int32_t *docs_at(const int32_t *docs, long B, long T, const int32_t *pos, long n) {
    int32_t *d = malloc(sizeof(int32_t) * B * n);
    for (long b = 0; b < B; b++)
        for (long i = 0; i < n; i++) d[b * n + i] = docs[b * T + pos[i]];
    return d;
}

static void test_attention_documents(void) {
    // documents starting mid-tile (5, 40, 100) and at a tile edge (64), sequences differing
    static const long at[] = {5, 40, 64, 100};
    att_case a = {2, 130, 130, 4, 2, 16, 0, NULL, NULL, NULL, NULL};
    a.qd = a.kd = make_docs(2, 130, 0.02, at, 4);
    run_case(&a, "documents at 5, 40, 64, 100 + random");
    free(a.qd);
    // short documents (about 20 tokens): far key tiles are skipped whole; fused qkv, GQA 8/1
    att_case b = {2, 256, 256, 8, 1, 24, 1, NULL, NULL, NULL, NULL};
    b.qd = b.kd = make_docs(2, 256, 0.05, NULL, 0);
    run_case(&b, "short documents T=256 fused");
    free(b.qd);
    // documents of 1-3 tokens, odd head size, T not a multiple of the tile
    att_case c = {1, 150, 150, 4, 4, 10, 0, NULL, NULL, NULL, NULL};
    c.qd = c.kd = make_docs(1, 150, 0.5, NULL, 0);
    run_case(&c, "documents of a few tokens");
    free(c.qd);
    // a chunk of queries (positions 100..163, document 3) over keys 0..99 of documents 0..2:
    // every key tile is skipped and every row sees no key
    att_case e = {1, 64, 100, 4, 2, 16, 0, NULL, NULL, NULL, NULL};
    e.qp = range_pos(64, 100), e.kp = range_pos(100, 0);
    static const long at3[] = {30, 60, 90};
    int32_t *d = make_docs(1, 164, 0.0, at3, 3);
    for (int i = 100; i < 164; i++) d[i] = 3;
    e.qd = docs_at(d, 1, 164, e.qp, 64), e.kd = docs_at(d, 1, 164, e.kp, 100);
    run_case(&e, "query chunk of its own document: every key tile skipped");
    free(e.qp), free(e.kp), free(e.qd), free(e.kd), free(d);
    // zig-zag (context parallel head-tail) positions with documents
    att_case z = {2, 64, 128, 4, 2, 16, 0, NULL, NULL, NULL, NULL};
    z.qp = malloc(sizeof(int32_t) * 64), z.kp = range_pos(128, 0);
    for (int i = 0; i < 32; i++) z.qp[i] = i, z.qp[32 + i] = 96 + i;
    int32_t *dz = make_docs(2, 128, 0.04, at, 4);
    z.qd = docs_at(dz, 2, 128, z.qp, 64), z.kd = docs_at(dz, 2, 128, z.kp, 128);
    run_case(&z, "zig-zag queries with documents");
    free(z.qp), free(z.kp), free(z.qd), free(z.kd), free(dz);
}

// Documents on 1, 2 and 3 threads: skipped key tiles still keep the backward's order of adds.
static void test_attention_documents_thread_count(void) {
    att_case a = {3, 200, 200, 4, 2, 32, 0, NULL, NULL, NULL, NULL};
    a.qd = a.kd = make_docs(3, 200, 0.05, NULL, 0);
    thread_count_case(&a, "documents B=3 T=200");
    free(a.qd);
    att_case b = {1, 256, 256, 8, 2, 16, 0, NULL, NULL, NULL, NULL};
    b.qd = b.kd = make_docs(1, 256, 0.03, NULL, 0);
    thread_count_case(&b, "documents B=1 T=256 NH=8 NKV=2");
    free(b.qd);
}

// One document everywhere: bitwise the causal result (no ids).
static void test_attention_one_document_is_causal(void) {
    const long B = 2, T = 150, NH = 4, NKV = 2, HS = 32, ld = (NH + 2 * NKV) * HS;
    float *qkv = malloc(sizeof(float) * B * T * ld), *dout = malloc(sizeof(float) * B * T * NH * HS);
    for (long i = 0; i < B * T * ld; i++) qkv[i] = frand(2.0f);
    for (long i = 0; i < B * T * NH * HS; i++) dout[i] = frand(1.0f);
    int32_t *zero = calloc((size_t)(B * T), sizeof(int32_t));
    float *scratch = malloc(sizeof(float) * ct_attention_scratch_floats(T, T, HS));
    long no = B * T * NH * HS, nl = B * NH * T, ng = B * T * ld;
    float *r[2];
    for (int w = 0; w < 2; w++) {
        const int32_t *d = w ? zero : NULL;
        float *o = r[w] = calloc((size_t)(no + nl + ng), sizeof(float)), *l = o + no, *g = l + nl;
        ct_attention_forward(o, l, qkv, ld, qkv + NH * HS, ld, qkv + (NH + NKV) * HS, ld, NULL, NULL, d, d, B, T, T,
                             NH, NKV, HS, scratch);
        ct_attention_backward(g, g + NH * HS, g + (NH + NKV) * HS, dout, o, l, qkv, ld, qkv + NH * HS, ld,
                              qkv + (NH + NKV) * HS, ld, NULL, NULL, d, d, B, T, T, NH, NKV, HS, scratch);
    }
    CHECK(memcmp(r[0], r[1], sizeof(float) * (size_t)(no + nl + ng)) == 0, "one document differs from causal");
    free(qkv), free(dout), free(zero), free(scratch), free(r[0]), free(r[1]);
}

int main(void) {
    rng_state = 0x9E3779B97F4A7C15ull;
    CT_RUN(test_attention_reference_vs_finite_differences);
    CT_RUN(test_attention_causal_shapes);
    CT_RUN(test_attention_random_shapes);
    CT_RUN(test_attention_positions);
    CT_RUN(test_attention_thread_count_invariance);
    CT_RUN(test_attention_scratch_sized_for_more_keys);
    CT_RUN(test_attention_head_split_bitwise);
    CT_RUN(test_attention_documents);
    CT_RUN(test_attention_documents_thread_count);
    CT_RUN(test_attention_one_document_is_causal);
    CT_TEST_EXIT();
}
