// AdamW (Loshchilov & Hutter 2019): Adam moments with bias correction, weight decay decoupled
// from the gradient (applied to the parameter directly, scaled by lr).
// (GCC does not vectorise this loop under the project's flags: sqrtf keeps its errno branch
// without -fno-math-errno. It is memory-bound and runs once per step, so it is left scalar.)
#include <math.h>

#include "kernels/kernels.h"

void ct_adamw_update(float *param, const float *grad, float *m, float *v, long n, float lr, float beta1, float beta2,
                     float eps, float weight_decay, long step, float grad_scale) {
    // bias corrections in double: 1 - beta^step loses digits in float for beta2 close to 1
    float bc1 = (float)(1.0 - pow((double)beta1, (double)step));
    float bc2 = (float)(1.0 - pow((double)beta2, (double)step));
#pragma omp parallel for schedule(static)
    for (long i = 0; i < n; i++) {
        float g = grad[i] * grad_scale;
        float mi = beta1 * m[i] + (1.0f - beta1) * g;
        float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
        m[i] = mi;
        v[i] = vi;
        float mhat = mi / bc1, vhat = vi / bc2;
        param[i] -= lr * (mhat / (sqrtf(vhat) + eps) + weight_decay * param[i]);
    }
}
