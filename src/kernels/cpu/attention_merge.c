// The exact merge of partial attention results by their log-sum-exp (context parallel's ring:
// each step's keys give a partial output over the same queries; kernels.h states the contract).
#include <math.h>

#include "kernels/kernels.h"

void ct_attention_merge(float *o, float *l, const float *o_part, const float *l_part, long B, long C, long NH,
                        long HS) {
#pragma omp parallel for collapse(2) schedule(static)
    for (long b = 0; b < B; b++)
        for (long t = 0; t < C; t++)
            for (long h = 0; h < NH; h++) {
                float *L = l + (b * NH + h) * C + t;
                const float Lp = l_part[(b * NH + h) * C + t];
                float *O = o + ((b * C + t) * NH + h) * HS;                  // (HS)
                const float *Op = o_part + ((b * C + t) * NH + h) * HS;      // (HS)
                if (Lp == -INFINITY) continue;  // the part saw no key for this row
                if (*L == -INFINITY) {          // nothing yet: take the part
                    *L = Lp;
                    for (long d = 0; d < HS; d++) O[d] = Op[d];
                    continue;
                }
                // weights exp(l_i - l_new) relative to the larger lse, so neither overflows
                const double m = *L > Lp ? *L : Lp;
                const double wa = exp((double)*L - m), wb = exp((double)Lp - m), s = wa + wb;
                const double ca = wa / s, cb = wb / s;
                for (long d = 0; d < HS; d++) O[d] = (float)(ca * O[d] + cb * Op[d]);
                *L = (float)(m + log(s));
            }
}
