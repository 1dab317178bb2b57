// The backward's P from the kept lse, down the columns of a score tile (attention_internal.h),
// shared by the fp32 and the bf16 attention (whose P is rounded after it).
#include <math.h>

#include "kernels/cpu/attention_internal.h"

void ct_att_exp_columns(float *pt, const float *lv, long nk) {
    for (long j = 0; j < nk; j++)
        for (long c = 0; c < CT_ATT_BQ; c += AW) {
            float *p = pt + j * CT_ATT_BQ + c;
            attv_store(p, attv_exp(attv_load(p) - attv_load(lv + c)));
        }
}
