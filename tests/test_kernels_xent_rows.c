// The cross-entropy row pieces (kernels.h "row pieces"; backend members xent_rows_*), called
// through the cpu table against float64: whole rows of logits (R, P·V) are cut into P vocabulary
// slices of V, the per-slice pieces are combined the way parallel/loss_parallel.c combines them
// over ranks (MAX of the maxes, SUM of the sums and target logits), and every intermediate and
// the loss and dlogits are compared with float64 over the whole rows. Odd sizes, ignored targets
// (-1), targets in and out of each slice, large logits; gather mode gives the same bits from a
// differently aligned copy of the rows (what its fixed-order sum is for; GCC 12 at -O3 happens
// not to peel a plain reduction either, so this guards the property rather than the mechanism).
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "test.h"
#include "test_rand.h"

static float *falloc(long n) { return malloc(sizeof(float) * (n > 0 ? n : 1)); }
static int same_row(const float *a, const float *b, long n) { return memcmp(a, b, sizeof(float) * n) == 0; }

typedef struct {
    long R, P, V;        // rows, slices, slice width; the whole vocabulary is P·V
    float *z;            // (R, P·V) logits
    int32_t *tg;         // (R) global targets, -1 = ignore
    double *mx, *lse;    // (R) float64 row max and log-sum-exp (ignored rows: 0)
    double loss;         // Σ over valid rows of lse - z[t]
} rows;

static rows make_rows(long R, long P, long V, float scale) {
    rows w = {R, P, V, falloc(R * P * V), malloc(sizeof(int32_t) * (R > 0 ? R : 1)), malloc(sizeof(double) * R),
              malloc(sizeof(double) * R), 0};
    const long Vt = P * V;
    for (long i = 0; i < R * Vt; i++) w.z[i] = (float)((2.0 * urand() - 1.0) * scale);
    for (long r = 0; r < R; r++) {
        w.tg[r] = urand() < 0.25 ? -1 : (int32_t)(urand() * Vt);
        w.mx[r] = w.lse[r] = 0;
        if (w.tg[r] < 0) continue;
        const float *zr = w.z + r * Vt;
        double m = -INFINITY, s = 0;
        for (long j = 0; j < Vt; j++) m = zr[j] > m ? zr[j] : m;
        for (long j = 0; j < Vt; j++) s += exp((double)zr[j] - m);
        w.mx[r] = m, w.lse[r] = m + log(s);
        w.loss += w.lse[r] - zr[w.tg[r]];
    }
    return w;
}
static void free_rows(rows *w) { free(w->z), free(w->tg), free(w->mx), free(w->lse); }

// slice p of the rows as its own (R, V) buffer
static float *slice_of(const rows *w, long p) {
    float *s = falloc(w->R * w->V);
    for (long r = 0; r < w->R; r++) memcpy(s + r * w->V, w->z + r * w->P * w->V + p * w->V, sizeof(float) * w->V);
    return s;
}

// float64 dlogits of row r at global id j: (softmax - onehot) · gs; 0 for ignored rows
static double ref_dlogit(const rows *w, long r, long j, double gs) {
    if (w->tg[r] < 0) return 0;
    return (exp((double)w->z[r * w->P * w->V + j] - w->lse[r]) - (j == w->tg[r])) * gs;
}

// Loss-parallel order: max per slice, MAX; exp-sum per slice, SUM; loss; dlogits per slice.
static void split_case(long R, long P, long V, float scale) {
    const ct_kernels *k = ct_kernels_get("cpu");
    rows w = make_rows(R, P, V, scale);
    const float gs = 0.37f;
    float **zs = malloc(sizeof(float *) * P), *mx = falloc(R), *mxp = falloc(R), *sum = falloc(R), *zt = falloc(R);
    float *s_p = falloc(R), *zt_p = falloc(R);
    for (long r = 0; r < R; r++) mx[r] = -INFINITY, sum[r] = zt[r] = 0;
    for (long p = 0; p < P; p++) {
        zs[p] = slice_of(&w, p);
        k->xent_rows_max(mxp, zs[p], w.tg, R, V);
        for (long r = 0; r < R; r++) {
            const float *zr = zs[p] + r * V;
            float want = w.tg[r] < 0 ? 0.0f : zr[0];  // ignored rows: 0
            for (long j = 0; j < V && w.tg[r] >= 0; j++) want = zr[j] > want ? zr[j] : want;
            CHECK(mxp[r] == want, "R%ld P%ld V%ld slice %ld row %ld max %g vs %g", R, P, V, p, r, mxp[r], want);
            mx[r] = mxp[r] > mx[r] ? mxp[r] : mx[r];
        }
    }
    for (long r = 0; r < R; r++)
        CHECK(mx[r] == (float)w.mx[r], "row %ld: MAX of slice maxes %g vs %g", r, mx[r], w.mx[r]);
    for (long p = 0; p < P; p++) {
        float *before = slice_of(&w, p);
        k->xent_rows_exp_sum(zs[p], s_p, zt_p, mx, w.tg, R, V, p * V);
        for (long r = 0; r < R; r++) {
            long t = w.tg[r], tl = t - p * V;
            if (t < 0) {
                CHECK(s_p[r] == 0 && zt_p[r] == 0 && same_row(zs[p] + r * V, before + r * V, V), "ignored row %ld",
                      r);
                continue;
            }
            double s = 0, e_err = 0;  // e <= 1: an absolute error is relative to the largest
            for (long j = 0; j < V; j++) {
                double e = exp((double)before[r * V + j] - w.mx[r]);
                s += e;
                e_err = fmax(e_err, fabs(zs[p][r * V + j] - e));
            }
            CHECK(e_err < 1e-6, "slice %ld row %ld exp err %g", p, r, e_err);
            CHECK_CLOSE(s_p[r], s, 1e-5, 1e-30);
            CHECK(zt_p[r] == (tl >= 0 && tl < V ? before[r * V + tl] : 0.0f), "slice %ld row %ld target logit", p, r);
            sum[r] += s_p[r], zt[r] += zt_p[r];  // the SUM over ranks
        }
        free(before);
    }
    double loss = 0, twice;
    k->xent_rows_loss(&loss, mx, sum, zt, w.tg, R);
    CHECK(fabs(loss - w.loss) <= 1e-5 * (fabs(w.loss) + 1), "R%ld P%ld V%ld loss %.9g vs %.9g", R, P, V, loss, w.loss);
    twice = loss;  // the loss is added to the sum given: twice is exactly 2 loss
    k->xent_rows_loss(&twice, mx, sum, zt, w.tg, R);
    CHECK(twice == 2 * loss, "R%ld P%ld V%ld: a second call gave %.17g, not 2 x %.17g", R, P, V, twice, loss);
    double derr = 0;
    for (long p = 0; p < P; p++) {
        k->xent_rows_dlogits(zs[p], sum, w.tg, R, V, p * V, gs);
        for (long r = 0; r < R; r++)
            for (long j = 0; j < V; j++) {
                double ref = ref_dlogit(&w, r, p * V + j, gs), got = zs[p][r * V + j];
                if (w.tg[r] < 0) CHECK(got == 0.0, "ignored row %ld has dlogits", r);
                derr = fmax(derr, fabs(got - ref) / gs);
            }
    }
    CHECK(derr < 1e-5, "R%ld P%ld V%ld dlogits err %g", R, P, V, derr);
    for (long p = 0; p < P; p++) free(zs[p]);
    free(zs), free(mx), free(mxp), free(sum), free(zt), free(s_p), free(zt_p);
    free_rows(&w);
}

// Gather mode: G (P, R, V) holds whole rows; each `mine` gets the whole-row numbers and its block
// turned into dlogits; the other blocks are left alone; the numbers do not depend on G's address.
static void gathered_case(long R, long P, long V, float scale) {
    const ct_kernels *k = ct_kernels_get("cpu");
    rows w = make_rows(R, P, V, scale);
    const float gs = 0.37f;
    const long n = P * R * V;
    float *G0 = falloc(n), *mx = falloc(R), *sum = falloc(R), *zt = falloc(R);
    float *mx2 = falloc(R), *sum2 = falloc(R), *zt2 = falloc(R);
    float *buf = falloc(n + 1);  // G one float off: a different alignment
    for (long p = 0; p < P; p++) {
        float *s = slice_of(&w, p);
        memcpy(G0 + p * R * V, s, sizeof(float) * R * V);
        free(s);
    }
    for (long mine = 0; mine < P; mine++) {
        float *G = falloc(n);
        memcpy(G, G0, sizeof(float) * n);
        k->xent_rows_gathered(G, mx, sum, zt, w.tg, P, R, V, mine, gs, 1);
        double loss = 0, derr = 0;
        k->xent_rows_loss(&loss, mx, sum, zt, w.tg, R);
        CHECK(fabs(loss - w.loss) <= 1e-5 * (fabs(w.loss) + 1), "gather loss %.9g vs %.9g", loss, w.loss);
        for (long r = 0; r < R; r++) {
            long t = w.tg[r];
            if (t < 0) {
                CHECK(mx[r] == 0 && sum[r] == 0 && zt[r] == 0, "ignored row %ld numbers", r);
            } else {
                CHECK(mx[r] == (float)w.mx[r], "row %ld max", r);
                CHECK_CLOSE(log((double)sum[r]) + mx[r], w.lse[r], 1e-6, 1e-6);
                CHECK(zt[r] == w.z[r * P * V + t], "row %ld target logit", r);
            }
            for (long j = 0; j < V; j++)
                derr = fmax(derr, fabs(G[mine * R * V + r * V + j] - ref_dlogit(&w, r, mine * V + j, gs)) / gs);
        }
        CHECK(derr < 1e-5, "R%ld P%ld V%ld mine %ld dlogits err %g", R, P, V, mine, derr);
        for (long p = 0; p < P; p++)
            if (p != mine)
                CHECK(same_row(G + p * R * V, G0 + p * R * V, R * V), "block %ld of mine %ld changed", p, mine);
        // forward only: G untouched; same numbers from a differently aligned copy
        memcpy(buf + 1, G0, sizeof(float) * n);
        k->xent_rows_gathered(buf + 1, mx2, sum2, zt2, w.tg, P, R, V, mine, gs, 0);
        CHECK(same_row(buf + 1, G0, n), "dlogits = 0 wrote G");
        CHECK(same_row(mx, mx2, R) && same_row(sum, sum2, R) && same_row(zt, zt2, R), "numbers depend on G's address");
        free(G);
    }
    free(G0), free(mx), free(sum), free(zt), free(mx2), free(sum2), free(zt2), free(buf);
    free_rows(&w);
}

static void test_split_rows(void) {
    split_case(1, 1, 1, 1.0f);
    split_case(7, 2, 13, 1.0f);
    split_case(33, 4, 1, 1.0f);   // slices of one id
    split_case(5, 3, 257, 1.0f);  // a tail after the vectorised part
    split_case(9, 2, 40, 30.0f);  // logits in the hundreds: exp needs the whole-row max
    split_case(0, 2, 8, 1.0f);    // no rows
}

static void test_gathered_rows(void) {
    gathered_case(1, 1, 1, 1.0f);
    gathered_case(7, 2, 13, 1.0f);
    gathered_case(6, 4, 1, 1.0f);
    gathered_case(5, 3, 257, 1.0f);
    gathered_case(9, 2, 40, 30.0f);
}

static void test_bad_target(void) {
    const ct_kernels *k = ct_kernels_get("cpu");
    int32_t ok[4] = {-1, 0, 4, 2}, hi[4] = {0, 5, -2, 1}, lo[4] = {0, 1, -2, 5};
    CHECK(k->xent_bad_target(ok, 4, 5) == -1, "valid targets refused");
    CHECK(k->xent_bad_target(hi, 4, 5) == 1, "first bad row (target = V)");
    CHECK(k->xent_bad_target(lo, 4, 5) == 2, "first bad row (target -2)");
    CHECK(k->xent_bad_target(ok, 0, 5) == -1, "no rows");
}

int main(void) {
    rng_state = 0xB7E151628AED2A6Aull;
    CT_RUN(test_split_rows);
    CT_RUN(test_gathered_rows);
    CT_RUN(test_bad_target);
    CT_TEST_EXIT();
}
