// The bf16 attention (kernels.h: ct_attention_forward_bf16 / ct_attention_backward_bf16) against
// a float64 reference written here, on inputs drawn as bf16 values (q, k, v, and dout too, so
// the kernel's rounding of dO is exact and the reference sees exactly the kernel's inputs).
//
// Error model. The kernel's products of bf16 values are exact in fp32 and summed in fp32; what
// it rounds to bf16 is P (forward: exp(S - m) with m the running max after each key tile of 64;
// backward: exp(S - lse)), dS = scale P (dP - D), and the output O. The reference computes those
// same quantities in double and rounds them to bf16 at the same points, so what is left between
// the two is fp32 error, which is bounded term by term:
//   - a score S = scale q.k: gamma_HS (fp32, u = 2^-24) times scale sum |q||k|, plus 3u |S| for
//     the scale (1/sqrtf(HS), rounded twice) and its multiply;
//   - exp (ct_fast_expf: < 1.5 ulp, relative 1.5 x 2^-23) of an argument off by the score's
//     error, the running max's (the largest score error of the row) and the subtraction's u;
//   - dP, D: gamma_HS times sum |dO||v|, sum |dO||O|; dS: those through its formula, plus 5u;
//   - a sum of n terms in fp32 (dQ over keys, dK / dV over queries and heads, O over keys with a
//     rescale per key tile): gamma_n of the sum of the terms' magnitudes.
// A value the kernel rounds to bf16 (P, dS, O) is checked through the rounding: where the
// reference's value and every value within its fp32 error bound round to the same bf16 (rounding
// is monotonic: the two ends of the interval decide), the kernel's rounded value must be that one
// exactly; elsewhere it may be off by that error plus one bf16 spacing (2^-7 relative), and that
// is what the term may add to the bound. So out is checked bitwise wherever its rounding is
// decided, and a P or dS rounded differently from round-to-nearest-even -- or not rounded at all
// (2^-9 relative on average per term, against fp32 bounds of 1e-5) -- fails.
// The merge of two partial results (ct_attention_merge) is checked against the exact attention:
// each part's P rounded (relative 2^-8 each, u_bf16 of tests/error_model.h) and its out rounded.
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "error_model.h"
#include "kernels/backend.h"
#include "kernels/kernels.h"
#include "test.h"
#include "test_rand.h"

static const double U32 = 0x1p-24;           // fp32 unit roundoff
static const double EXP_ERR = 1.5 * 0x1p-23;  // ct_fast_expf, relative

static double gam(double n) { return ct_em_gamma(n, U32); }

static uint16_t to_bf16(float x) {  // nearest, ties to even (finite x)
    uint32_t u;
    memcpy(&u, &x, 4);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
static float from_bf16(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float x;
    memcpy(&x, &u, 4);
    return x;
}
// x rounded to 8 significant bits, nearest, ties to even (in the normal range of bf16)
static double round_bf16_d(double x) {
    if (x == 0) return 0;
    int e;
    double m = frexp(x, &e);  // 0.5 <= |m| < 1
    return ldexp(nearbyint(ldexp(m, 8)), e - 8);
}
// the spacing of bf16 values at magnitude a
static double spacing_bf16(double a) {
    int e;
    frexp(a, &e);
    return ldexp(1.0, e - 8);
}
// How far the kernel's bf16 of a value within e of x can be from the reference's bf16 of x.
static double flip(double x, double e) {
    if (round_bf16_d(x - e) == round_bf16_d(x + e)) return 0;
    return e + spacing_bf16(fabs(x) + e);
}

typedef struct {
    long B, Tq, Tk, NH, NKV, HS;
    int32_t *qp, *kp;  // positions or NULL
    int32_t *qd, *kd;  // document ids (B, Tq), (B, Tk) or NULL
} att_case;

// The inputs of one case: bf16 q, k, v with strides wider than the heads (odd, so pairs of
// elements straddle 32-bit words), dout fp32 holding bf16 values, initial gradients.
typedef struct {
    long ldq, ldk, ldv, nq, nk, nv, no;
    uint16_t *q, *k, *v;
    float *dout, *g0;  // g0 (nq + nk + nv): dq, dk, dv before the backward adds
} att_inputs;

static att_inputs make_inputs(const att_case *c) {
    att_inputs in;
    in.ldq = c->NH * c->HS + 3, in.ldk = c->NKV * c->HS + 1, in.ldv = c->NKV * c->HS;
    in.nq = c->B * c->Tq * in.ldq, in.nk = c->B * c->Tk * in.ldk, in.nv = c->B * c->Tk * in.ldv;
    in.no = c->B * c->Tq * c->NH * c->HS;
    in.q = malloc(2 * in.nq), in.k = malloc(2 * in.nk), in.v = malloc(2 * in.nv);
    for (long i = 0; i < in.nq; i++) in.q[i] = to_bf16(frand(2.0f));
    for (long i = 0; i < in.nk; i++) in.k[i] = to_bf16(frand(2.0f));
    for (long i = 0; i < in.nv; i++) in.v[i] = to_bf16(frand(1.0f));
    in.dout = malloc(sizeof(float) * in.no);
    for (long i = 0; i < in.no; i++) in.dout[i] = from_bf16(to_bf16(frand(1.0f)));
    in.g0 = malloc(sizeof(float) * (in.nq + in.nk + in.nv));
    for (long i = 0; i < in.nq + in.nk + in.nv; i++) in.g0[i] = frand(0.1f);
    return in;
}
static void free_inputs(att_inputs *in) { free(in->q), free(in->k), free(in->v), free(in->dout), free(in->g0); }

static int visible(const att_case *c, long b, long i, long j) {
    long qpos = c->qp ? c->qp[i] : i, kpos = c->kp ? c->kp[j] : j;
    return kpos <= qpos && (!c->qd || c->qd[b * c->Tq + i] == c->kd[b * c->Tk + j]);
}

// Scores of row (b, h, i) in double, their fp32 error bounds, and which keys are visible.
static void row_scores(const att_case *c, const att_inputs *in, long b, long h, long i, double *s, double *es,
                       char *vis) {
    const long HS = c->HS, g = h / (c->NH / c->NKV);
    const double scale = 1.0 / sqrt((double)HS);
    const uint16_t *qi = in->q + (b * c->Tq + i) * in->ldq + h * HS;
    for (long j = 0; j < c->Tk; j++) {
        vis[j] = (char)visible(c, b, i, j);
        if (!vis[j]) continue;
        const uint16_t *kj = in->k + (b * c->Tk + j) * in->ldk + g * HS;
        double dot = 0, mag = 0;
        for (long d = 0; d < HS; d++) {
            double t = (double)from_bf16(qi[d]) * from_bf16(kj[d]);
            dot += t, mag += fabs(t);
        }
        s[j] = scale * dot;
        es[j] = scale * gam((double)HS) * mag + 3 * U32 * fabs(s[j]);
    }
}

// The forward: out must be the reference's bf16 of O wherever its rounding is decided, and lse
// within its bound. Returns the number of out elements whose rounding the bound left open.
static long check_forward(const att_case *c, const att_inputs *in, const uint16_t *out, const float *lse,
                          const char *name) {
    const long B = c->B, Tq = c->Tq, Tk = c->Tk, NH = c->NH, HS = c->HS, grp = c->NH / c->NKV;
    const long ntk = (Tk + 63) / 64;
    double *s = malloc(sizeof(double) * Tk), *es = malloc(sizeof(double) * Tk), *mt = malloc(sizeof(double) * ntk);
    double *num = malloc(sizeof(double) * HS), *mag = malloc(sizeof(double) * HS), *dev = malloc(sizeof(double) * HS);
    char *vis = malloc((size_t)Tk);
    long open = 0, bad = 0;
    for (long b = 0; b < B; b++)
        for (long h = 0; h < NH; h++)
            for (long i = 0; i < Tq; i++) {
                row_scores(c, in, b, h, i, s, es, vis);
                const uint16_t *o = out + ((b * Tq + i) * NH + h) * HS;
                const float L = lse[(b * NH + h) * Tq + i];
                // running max after each key tile, and the row's largest score error
                double m = -INFINITY, ES = 0;
                long nvis = 0;
                for (long t = 0; t < ntk; t++) {
                    for (long j = t * 64; j < Tk && j < (t + 1) * 64; j++)
                        if (vis[j]) m = fmax(m, s[j]), ES = fmax(ES, es[j]), nvis++;
                    mt[t] = m;
                }
                if (nvis == 0) {
                    CHECK(L == -INFINITY, "%s: lse %g for a row that sees no key", name, L);
                    for (long d = 0; d < HS; d++) bad += o[d] != 0;
                    continue;
                }
                // the kernel's weight of key j: bf16(exp(s_j - m_t)) exp(m_t - m); l sums exp(s_j - m)
                double l = 0, dl = 0, first = -INFINITY;
                for (long d = 0; d < HS; d++) num[d] = mag[d] = dev[d] = 0;
                for (long j = 0; j < Tk; j++) {
                    if (!vis[j]) continue;
                    long t = j / 64;
                    if (first == -INFINITY) first = mt[t];
                    double p = exp(s[j] - mt[t]), w = exp(mt[t] - m);
                    double ae = es[j] + ES + U32 * fabs(s[j] - mt[t]);
                    double dp = p * (expm1(ae) * (1 + EXP_ERR) + EXP_ERR);  // the kernel's P within p +- dp
                    double r = round_bf16_d(p), a = flip(p, dp);
                    l += p * w, dl += dp * w;
                    const uint16_t *vj = in->v + (b * Tk + j) * in->ldv + h / grp * HS;
                    for (long d = 0; d < HS; d++) {
                        double vv = from_bf16(vj[d]);
                        num[d] += r * w * vv, mag[d] += (r + a) * w * fabs(vv), dev[d] += a * w * fabs(vv);
                    }
                }
                // fp32 sums over the row's keys with a rescale per key tile (its exp, subtraction
                // and multiply), the telescoped rescales' argument errors over the row's max span
                const double chain = gam((double)(nvis + 2 * ntk)) + ntk * (EXP_ERR + 3 * U32) + U32 * (m - first);
                dl += chain * l;
                double ref_lse = m + log(l);
                double e_lse = ES + 1.01 * dl / l + 4 * U32 * (fabs(m) + fabs(log(l)));
                if (!(fabs(L - ref_lse) <= e_lse)) {
                    if (!bad)
                        printf("  %s: lse row (%ld, %ld, %ld): %.9g vs %.9g, bound %.3g\n", name, b, h, i, L, ref_lse,
                               e_lse);
                    bad++;
                }
                for (long d = 0; d < HS; d++) {
                    double O = num[d] / l;
                    double dn = dev[d] + chain * mag[d];
                    double eO = (dn + fabs(O) * dl) / (l - dl) + 3 * U32 * (fabs(O) + 1e-30);
                    double allow = flip(O, eO);
                    double got = from_bf16(o[d]);
                    open += allow > 0;
                    if (!(fabs(got - round_bf16_d(O)) <= allow)) {
                        if (!bad)
                            printf("  %s: out (%ld, %ld, %ld, %ld) = %.9g, want bf16(%.9g) = %.9g (bound %.3g)\n", name,
                                   b, i, h, d, got, O, round_bf16_d(O), allow);
                        bad++;
                    }
                }
            }
    CHECK(bad == 0, "%s: %ld out or lse values off the reference", name, bad);
    free(s), free(es), free(mt), free(num), free(mag), free(dev), free(vis);
    return open;
}

// The backward from the kernel's own out and lse (its inputs): dq, dk, dv (added to g0) within
// their bounds of the reference, in double, of the same contract.
static void check_backward(const att_case *c, const att_inputs *in, const uint16_t *out, const float *lse,
                           const float *g, const char *name) {
    const long B = c->B, Tq = c->Tq, Tk = c->Tk, NH = c->NH, HS = c->HS, grp = c->NH / c->NKV;
    const long ntq = (Tq + 63) / 64, ntk = (Tk + 63) / 64;
    const long n = in->nq + in->nk + in->nv;
    const double scale = 1.0 / sqrt((double)HS);
    double *ref = calloc((size_t)n, sizeof(double)), *mag = calloc((size_t)n, sizeof(double));
    double *dev = calloc((size_t)n, sizeof(double));
    double *s = malloc(sizeof(double) * Tk), *es = malloc(sizeof(double) * Tk);
    char *vis = malloc((size_t)Tk);
    double *rq = ref, *rk = ref + in->nq, *rv = rk + in->nk;
    for (long b = 0; b < B; b++)
        for (long h = 0; h < NH; h++)
            for (long i = 0; i < Tq; i++) {
                const float L = lse[(b * NH + h) * Tq + i];
                if (L == -INFINITY) continue;  // sees no key: P = 0
                row_scores(c, in, b, h, i, s, es, vis);
                const long g = h / grp, qrow = (b * Tq + i) * in->ldq + h * HS;
                const float *dO = in->dout + ((b * Tq + i) * NH + h) * HS;
                const uint16_t *O = out + ((b * Tq + i) * NH + h) * HS;
                double D = 0, magD = 0;
                for (long d = 0; d < HS; d++) {
                    double t = (double)dO[d] * from_bf16(O[d]);
                    D += t, magD += fabs(t);
                }
                const double eD = gam((double)HS) * magD;
                for (long j = 0; j < Tk; j++) {
                    if (!vis[j]) continue;
                    const long krow = (b * Tk + j) * in->ldk + g * HS, vrow = (b * Tk + j) * in->ldv + g * HS;
                    double p = exp(s[j] - L);
                    double ae = es[j] + U32 * fabs(s[j] - L);
                    double ep = p * (expm1(ae) * (1 + EXP_ERR) + EXP_ERR);
                    double rp = round_bf16_d(p), ap = flip(p, ep);
                    double dp = 0, magdp = 0;
                    for (long d = 0; d < HS; d++) {
                        double t = (double)dO[d] * from_bf16(in->v[vrow + d]);
                        dp += t, magdp += fabs(t);
                    }
                    const double edp = gam((double)HS) * magdp, x = fabs(dp - D) + edp + eD;
                    double ds = scale * p * (dp - D);
                    double eds = scale * (ep * x + p * (edp + eD)) + 5 * U32 * scale * (p + ep) * x;
                    double rds = round_bf16_d(ds), ads = flip(ds, eds);
                    for (long d = 0; d < HS; d++) {
                        double qd = from_bf16(in->q[qrow + d]), kd = from_bf16(in->k[krow + d]);
                        rq[qrow + d] += rds * kd, mag[qrow + d] += (fabs(rds) + ads) * fabs(kd);
                        dev[qrow + d] += ads * fabs(kd);
                        rk[krow + d] += rds * qd, mag[in->nq + krow + d] += (fabs(rds) + ads) * fabs(qd);
                        dev[in->nq + krow + d] += ads * fabs(qd);
                        rv[vrow + d] += rp * dO[d], mag[in->nq + in->nk + vrow + d] += (rp + ap) * fabs(dO[d]);
                        dev[in->nq + in->nk + vrow + d] += ap * fabs(dO[d]);
                    }
                }
            }
    // the fp32 sums: dq over keys (and the tiles' partial sums, and g0), dk and dv over every
    // query of every head of the group
    const double gq = gam((double)(Tk + ntk + 1)), gkv = gam((double)(grp * (Tq + ntq) + 1));
    long bad = 0;
    double worst = 0;
    const char *what[3] = {"dq", "dk", "dv"};
    for (long x = 0; x < n; x++) {
        int part = x < in->nq ? 0 : x < in->nq + in->nk ? 1 : 2;
        double got = (double)g[x] - in->g0[x];
        double bound = dev[x] + (part ? gkv : gq) * (mag[x] + fabs(in->g0[x])) + U32 * fabs(g[x]);
        double e = fabs(got - ref[x]);
        if (bound > 0 && e / bound > worst) worst = e / bound;
        if (!(e <= bound)) {
            if (!bad)
                printf("  %s: %s[%ld] += %.9g, want %.9g (bound %.3g)\n", name, what[part], x, got, ref[x], bound);
            bad++;
        }
    }
    printf("  %s: gradients at most %.3f of their bounds\n", name, worst);
    CHECK(bad == 0, "%s: %ld gradient values off the reference", name, bad);
    free(ref), free(mag), free(dev), free(s), free(es), free(vis);
}

static void run_case(const att_case *c, const char *name) {
    att_inputs in = make_inputs(c);
    const long nl = c->B * c->NH * c->Tq, ng = in.nq + in.nk + in.nv;
    uint16_t *out = malloc(2 * in.no);
    float *lse = malloc(sizeof(float) * nl), *g = malloc(sizeof(float) * ng);
    float *scratch = malloc(sizeof(float) * ct_attention_scratch_floats(c->Tq, c->Tk, c->HS));
    memcpy(g, in.g0, sizeof(float) * ng);
    ct_attention_forward_bf16(out, lse, in.q, in.ldq, in.k, in.ldk, in.v, in.ldv, c->qp, c->kp, c->qd, c->kd, c->B,
                              c->Tq, c->Tk, c->NH, c->NKV, c->HS, scratch);
    long open = check_forward(c, &in, out, lse, name);
    ct_attention_backward_bf16(g, g + in.nq, g + in.nq + in.nk, in.dout, out, lse, in.q, in.ldq, in.k, in.ldk, in.v,
                               in.ldv, c->qp, c->kp, c->qd, c->kd, c->B, c->Tq, c->Tk, c->NH, c->NKV, c->HS, scratch);
    printf("  %s: out checked bitwise but for %ld of %ld values\n", name, open, in.no);
    check_backward(c, &in, out, lse, g, name);
    free_inputs(&in), free(out), free(lse), free(g), free(scratch);
}

static int32_t *range_pos(long n, long start) {
    int32_t *p = malloc(sizeof(int32_t) * n);
    for (long i = 0; i < n; i++) p[i] = (int32_t)(start + i);
    return p;
}

static void test_bf16_causal_shapes(void) {
    const att_case cs[] = {
        {2, 130, 130, 4, 2, 64, NULL, NULL, NULL, NULL},  // grouped queries, T past two tiles
        {1, 200, 200, 4, 1, 128, NULL, NULL, NULL, NULL},  // one kv head, head size 128
        {2, 64, 64, 4, 4, 64, NULL, NULL, NULL, NULL},     // NH == NKV, one whole tile
        {2, 77, 77, 2, 2, 7, NULL, NULL, NULL, NULL},      // an odd head size
        {1, 1, 1, 4, 2, 40, NULL, NULL, NULL, NULL},       // one token
    };
    char name[96];
    for (unsigned i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        const att_case *c = &cs[i];
        snprintf(name, sizeof name, "B=%ld T=%ld NH=%ld NKV=%ld HS=%ld", c->B, c->Tq, c->NH, c->NKV, c->HS);
        run_case(c, name);
    }
}

// Context-parallel chunks: queries and keys at explicit positions, Tq != Tk.
static void test_bf16_positions(void) {
    att_case a = {1, 64, 64, 4, 2, 64, NULL, NULL, NULL, NULL};
    a.qp = range_pos(64, 64), a.kp = range_pos(64, 0);  // a query chunk over an earlier key chunk: all seen
    run_case(&a, "queries 64..127 over keys 0..63");
    free(a.qp), free(a.kp);
    att_case b = {1, 70, 130, 4, 2, 32, NULL, NULL, NULL, NULL};
    b.qp = range_pos(70, 60), b.kp = range_pos(130, 0);
    run_case(&b, "queries 60..129 over keys 0..129");
    free(b.qp), free(b.kp);
    att_case z = {2, 64, 128, 4, 2, 64, NULL, NULL, NULL, NULL};  // zig-zag chunks 0..31 + 96..127
    z.qp = malloc(sizeof(int32_t) * 64), z.kp = range_pos(128, 0);
    for (int i = 0; i < 32; i++) z.qp[i] = i, z.qp[32 + i] = 96 + i;
    run_case(&z, "zig-zag queries over keys 0..127");
    free(z.qp), free(z.kp);
    att_case e = {2, 70, 100, 8, 1, 24, NULL, NULL, NULL, NULL};
    e.qp = range_pos(70, 0), e.kp = range_pos(100, 30);  // rows 0..29 see no key
    run_case(&e, "queries 0..69 over keys 30..129 (rows that see no key)");
    free(e.qp), free(e.kp);
}

static int32_t *make_docs(long B, long T, double p) {
    int32_t *d = malloc(sizeof(int32_t) * B * T);
    for (long b = 0; b < B; b++) {
        int32_t id = 0;
        for (long i = 0; i < T; i++) {
            id += i == 5 || i == 64 || i == 100;  // documents mid-tile and at a tile edge
            d[b * T + i] = id;
            if (urand() < p) id++;
        }
    }
    return d;
}

static void test_bf16_documents(void) {
    att_case a = {2, 150, 150, 4, 2, 32, NULL, NULL, NULL, NULL};
    a.qd = a.kd = make_docs(2, 150, 0.02);
    run_case(&a, "documents B=2 T=150");
    free(a.qd);
    att_case b = {1, 256, 256, 8, 2, 16, NULL, NULL, NULL, NULL};  // short documents: key tiles skipped
    b.qd = b.kd = make_docs(1, 256, 0.08);
    run_case(&b, "short documents T=256");
    free(b.qd);
}

// Two halves of the keys run apart and merged by their lse (ct_attention_merge, as context
// parallel's ring does) against the exact attention over all keys: each part's P is rounded
// (u_bf16 relative each, summed over sum p |v|) and its out (u_bf16 |O_part|), weighted by the
// part's share of the row's probability; plus the parts' lse errors through the weights.
static void test_bf16_merge(void) {
    const long B = 2, T = 192, NH = 4, NKV = 2, HS = 64, H = 96;
    att_case whole = {B, T, T, NH, NKV, HS, NULL, NULL, NULL, NULL};
    att_inputs in = make_inputs(&whole);
    const long no = in.no, nl = B * NH * T;
    uint16_t *o2 = malloc(2 * no);
    float *o = malloc(sizeof(float) * no), *op = malloc(sizeof(float) * no);
    float *l = malloc(sizeof(float) * nl), *lp = malloc(sizeof(float) * nl);
    float *scratch = malloc(sizeof(float) * ct_attention_scratch_floats(T, T, HS));
    int32_t *qp = range_pos(T, 0), *k0 = range_pos(H, 0), *k1 = range_pos(T - H, H);
    // part 0: keys 0..H-1, part 1: keys H..T-1, of each sequence (a call per sequence: batch b's
    // key rows start at b T)
    for (int part = 0; part < 2; part++) {
        const long j0 = part ? H : 0, nk = part ? T - H : H;
        for (long b = 0; b < B; b++)
            ct_attention_forward_bf16(o2 + b * T * NH * HS, (part ? lp : l) + b * NH * T, in.q + b * T * in.ldq, in.ldq,
                                      in.k + (b * T + j0) * in.ldk, in.ldk, in.v + (b * T + j0) * in.ldv, in.ldv, qp,
                                      part ? k1 : k0, NULL, NULL, 1, T, nk, NH, NKV, HS, scratch);
        for (long x = 0; x < no; x++) (part ? op : o)[x] = from_bf16(o2[x]);
    }
    float *o0 = malloc(sizeof(float) * no), *l0 = malloc(sizeof(float) * nl);
    memcpy(o0, o, sizeof(float) * no), memcpy(l0, l, sizeof(float) * nl);
    ct_attention_merge(o, l, op, lp, B, T, NH, HS);
    long bad = 0;
    double worst = 0;
    const double scale = 1.0 / sqrt((double)HS), u = ct_em_u_bf16;
    double *s = malloc(sizeof(double) * T);
    for (long b = 0; b < B; b++)
        for (long h = 0; h < NH; h++)
            for (long i = 0; i < T; i++) {
                const long g = h / (NH / NKV);
                const uint16_t *qi = in.q + (b * T + i) * in.ldq + h * HS;
                double m = -INFINITY, sum = 0, mlo = 0;
                for (long j = 0; j <= i; j++) {
                    const uint16_t *kj = in.k + (b * T + j) * in.ldk + g * HS;
                    double dot = 0, mg = 0;
                    for (long d = 0; d < HS; d++) {
                        double t = (double)from_bf16(qi[d]) * from_bf16(kj[d]);
                        dot += t, mg += fabs(t);
                    }
                    s[j] = scale * dot, m = fmax(m, s[j]), mlo = fmax(mlo, scale * mg);
                }
                for (long j = 0; j <= i; j++) sum += exp(s[j] - m);
                // a part's lse error: its scores' (gamma_HS of their magnitudes), its fp32 sum of
                // up to T exps and the rescales of its key tiles, the exps', and log's roundings
                const double e_lse = gam((double)HS) * mlo + gam((double)(T + 8)) + 8 * EXP_ERR +
                                     4 * U32 * (fabs(m) + fabs(log(sum)));
                const long row = (b * T + i) * NH + h;
                const double L0 = l0[(b * NH + h) * T + i], L1 = lp[(b * NH + h) * T + i];
                const double w0 = L0 == -INFINITY ? 0 : exp(L0 - (m + log(sum)));
                const double w1 = L1 == -INFINITY ? 0 : exp(L1 - (m + log(sum)));
                for (long d = 0; d < HS; d++) {
                    double ref = 0, apv = 0;
                    for (long j = 0; j <= i; j++) {
                        double p = exp(s[j] - m) / sum, vv = from_bf16(in.v[(b * T + j) * in.ldv + g * HS + d]);
                        ref += p * vv, apv += p * fabs(vv);
                    }
                    const double a0 = fabs(o0[row * HS + d]), a1 = fabs(op[row * HS + d]);
                    // P rounded (u) and off by its fp32 error (the score's and the sums', within
                    // 2 e_lse); each part's out rounded (u), weighted by exp(lse_part - lse), whose
                    // lse errors move it by 3 e_lse relative
                    double bound = (u + 2 * e_lse) * apv + (u + 3 * e_lse) * (w0 * a0 + w1 * a1) + 4 * U32 * fabs(ref);
                    double e = fabs(o[row * HS + d] - ref);
                    worst = fmax(worst, e / bound);
                    if (!(e <= bound)) {
                        if (!bad)
                            printf("  merged out (%ld, %ld, %ld, %ld) = %.9g, want %.9g (bound %.3g)\n", b, i, h, d,
                                   o[row * HS + d], ref, bound);
                        bad++;
                    }
                }
            }
    printf("  merged outputs at most %.3f of their bounds\n", worst);
    CHECK(bad == 0, "%ld merged values off the exact attention", bad);
    free_inputs(&in), free(o2), free(o), free(op), free(l), free(lp), free(scratch), free(qp), free(k0), free(k1);
    free(o0), free(l0), free(s);
}

// 1, 2 and 3 threads: bitwise the same out, lse and gradients. Two threads take whole kv heads
// (4 of them) with their K and V copied; three take single items with K and V packed per tile.
static void test_bf16_thread_count_invariance(void) {
    att_case c = {2, 200, 200, 4, 2, 32, NULL, NULL, NULL, NULL};
    att_inputs in = make_inputs(&c);
    const long nl = c.B * c.NH * c.Tq, ng = in.nq + in.nk + in.nv;
    int saved = omp_get_max_threads();
    omp_set_num_threads(3);
    float *scratch = malloc(sizeof(float) * ct_attention_scratch_floats(c.Tq, c.Tk, c.HS));
    uint16_t *out[3];
    float *lg[3];
    for (int t = 0; t < 3; t++) {
        omp_set_num_threads(t + 1);
        out[t] = malloc(2 * in.no), lg[t] = malloc(sizeof(float) * (nl + ng));
        float *lse = lg[t], *g = lse + nl;
        memcpy(g, in.g0, sizeof(float) * ng);
        ct_attention_forward_bf16(out[t], lse, in.q, in.ldq, in.k, in.ldk, in.v, in.ldv, NULL, NULL, NULL, NULL, c.B,
                                  c.Tq, c.Tk, c.NH, c.NKV, c.HS, scratch);
        ct_attention_backward_bf16(g, g + in.nq, g + in.nq + in.nk, in.dout, out[t], lse, in.q, in.ldq, in.k, in.ldk,
                                   in.v, in.ldv, NULL, NULL, NULL, NULL, c.B, c.Tq, c.Tk, c.NH, c.NKV, c.HS, scratch);
    }
    omp_set_num_threads(saved);
    for (int t = 1; t < 3; t++) {
        CHECK(memcmp(out[0], out[t], 2 * in.no) == 0, "out: 1 and %d threads differ", t + 1);
        CHECK(memcmp(lg[0], lg[t], sizeof(float) * (nl + ng)) == 0, "lse or gradients: 1 and %d threads differ", t + 1);
    }
    free_inputs(&in), free(scratch);
    for (int t = 0; t < 3; t++) free(out[t]), free(lg[t]);
}

// Kernel sets whose pair step is the same (ct_attention_bf16_path) give the same bits: each
// product sums a C element over k in the same order in one register chain whatever the vector
// width, the softmax's exp is the same fused polynomial per lane, and the other sums run in the
// same order. Sets with VDPBF16PS are compared with each other only: whether the instruction
// rounds as the two FMAs do (and it flushes denormals, which they do not) is the CPU's business,
// and the float64 checks above run under every set (run_tests.sh) whichever way it rounds. The
// amx set's step ("amx": tile multiplies, which sum a tile's pairs in their own order) is the
// only one of its kind, held by the float64 checks alone.
static void test_bf16_same_bits_on_every_set(void) {
    int start = ct_kernel_set_active(), runnable = 0;
    for (int i = 0; i < ct_kernel_set_count(); i++) runnable += ct_kernel_set_runnable(i);
    if (runnable < 2) {
        printf("  only %s runs here: nothing to compare\n", ct_kernel_set_name(start));
        return;
    }
    att_case c = {2, 130, 130, 4, 2, 64, NULL, NULL, NULL, NULL};
    att_inputs in = make_inputs(&c);
    const long nl = c.B * c.NH * c.Tq, ng = in.nq + in.nk + in.nv;
    float *scratch = malloc(sizeof(float) * ct_attention_scratch_floats(c.Tq, c.Tk, c.HS));
    uint16_t *out = malloc(2 * in.no), *out0 = malloc(2 * in.no);
    float *lg = malloc(sizeof(float) * (nl + ng)), *lg0 = malloc(sizeof(float) * (nl + ng));
    for (int pass = 0; pass < 2; pass++) {  // the sets taking the "fma" step, then "vdpbf16ps"'s
        int first = -1;
        for (int i = 0; i < ct_kernel_set_count(); i++) {
            if (!ct_kernel_set_runnable(i)) continue;
            ct_kernel_set_install(i);
            if (strcmp(ct_attention_bf16_path(), pass ? "vdpbf16ps" : "fma")) continue;
            float *lse = lg, *g = lg + nl;
            memcpy(g, in.g0, sizeof(float) * ng);
            ct_attention_forward_bf16(out, lse, in.q, in.ldq, in.k, in.ldk, in.v, in.ldv, NULL, NULL, NULL, NULL, c.B, c.Tq,
                                      c.Tk, c.NH, c.NKV, c.HS, scratch);
            ct_attention_backward_bf16(g, g + in.nq, g + in.nq + in.nk, in.dout, out, lse, in.q, in.ldq, in.k, in.ldk,
                                       in.v, in.ldv, NULL, NULL, NULL, NULL, c.B, c.Tq, c.Tk, c.NH, c.NKV, c.HS, scratch);
            if (first < 0) {
                first = i;
                memcpy(out0, out, 2 * in.no), memcpy(lg0, lg, sizeof(float) * (nl + ng));
                continue;
            }
            printf("  %s against %s (pair step %s)\n", ct_kernel_set_name(i), ct_kernel_set_name(first),
                   ct_attention_bf16_path());
            CHECK(memcmp(out0, out, 2 * in.no) == 0, "out: %s differs from %s", ct_kernel_set_name(i),
                  ct_kernel_set_name(first));
            CHECK(memcmp(lg0, lg, sizeof(float) * (nl + ng)) == 0, "lse or gradients: %s differ from %s",
                  ct_kernel_set_name(i), ct_kernel_set_name(first));
        }
    }
    ct_kernel_set_install(start);
    free_inputs(&in), free(scratch), free(out), free(out0), free(lg), free(lg0);
}

// The cpu table's members are these functions.
static void test_bf16_in_table(void) {
    const ct_kernels *k = ct_kernels_get("cpu");
    CHECK(k && k->attention_forward_bf16 && k->attention_backward_bf16, "the cpu table has no bf16 attention");
}

int main(void) {
    rng_state = 0x2545F4914F6CDD1Dull;
    CT_RUN(test_bf16_in_table);
    CT_RUN(test_bf16_causal_shapes);
    CT_RUN(test_bf16_positions);
    CT_RUN(test_bf16_documents);
    CT_RUN(test_bf16_merge);
    CT_RUN(test_bf16_thread_count_invariance);
    CT_RUN(test_bf16_same_bits_on_every_set);
    CT_TEST_EXIT();
}
