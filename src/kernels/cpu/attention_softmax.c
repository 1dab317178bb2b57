// The attention's softmax down the columns of a score tile (attention_internal.h): the
// forward's online softmax of one key tile and the backward's P from the kept lse, shared by the
// fp32 and the bf16 attention (whose P is rounded after these).
#include <math.h>

#include "kernels/cpu/attention_internal.h"

void ct_att_softmax_columns(float *st, float *m, float *l, float *al, long nk) {
    const attv ninf = attv_splat(-INFINITY), zero = attv_splat(0.0f);
    for (long c = 0; c < CT_ATT_BQ; c += AW) {
        // the running max over four chains, not one: a chain of 64 dependent compares and blends
        // took a sixth of the forward's own time (perf). The max of finite values and -inf is
        // the same whatever the order (a +0 / -0 tie may go either way; both give the same
        // exps, sums and lse below).
        attv mold = attv_load(m + c), mx = mold, m1 = mold, m2 = mold, m3 = mold;
        long j = 0;
        for (; j + 4 <= nk; j += 4) {
            const float *sp = st + j * CT_ATT_BQ + c;
            mx = attv_max(attv_load(sp), mx);
            m1 = attv_max(attv_load(sp + CT_ATT_BQ), m1);
            m2 = attv_max(attv_load(sp + 2 * CT_ATT_BQ), m2);
            m3 = attv_max(attv_load(sp + 3 * CT_ATT_BQ), m3);
        }
        for (; j < nk; j++) mx = attv_max(attv_load(st + j * CT_ATT_BQ + c), mx);
        mx = attv_max(attv_max(m1, mx), attv_max(m3, m2));
        attv mu = attv_select(mx == ninf, zero, mx), sum = zero;
        for (long j = 0; j < nk; j++) {
            float *sp = st + j * CT_ATT_BQ + c;
            attv e = attv_exp(attv_load(sp) - mu);
            attv_store(sp, e);
            sum += e;
        }
        attv a = attv_exp(mold - mu);  // 0 while m is -inf
        attv_store(al + c, a);
        attv_store(l + c, attv_load(l + c) * a + sum);
        attv_store(m + c, mx);
    }
}

void ct_att_exp_columns(float *pt, const float *lv, long nk) {
    for (long j = 0; j < nk; j++)
        for (long c = 0; c < CT_ATT_BQ; c += AW) {
            float *p = pt + j * CT_ATT_BQ + c;
            attv_store(p, attv_exp(attv_load(p) - attv_load(lv + c)));
        }
}
