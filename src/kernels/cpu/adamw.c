// AdamW (Loshchilov & Hutter 2019): Adam moments with bias correction, weight decay decoupled
// from the gradient (applied to the parameter directly, scaled by lr).
// GCC does not vectorise the plain loop under the project's flags (sqrtf keeps its errno branch
// without -fno-math-errno), so with AVX the body runs 8 lanes at a time on intrinsics: the same
// operations in the same order, each IEEE-exact (sqrt and division are correctly rounded), so
// every element gets the scalar loop's bits.
#include <math.h>

#if defined(__AVX__)
#include <immintrin.h>
#endif

#include "kernels/kernels.h"

void ct_adamw_update(float *param, const float *grad, float *m, float *v, long n, float lr, float beta1, float beta2,
                     float eps, float weight_decay, long step, const float *grad_scale_at) {
    float grad_scale = *grad_scale_at;
    if (grad_scale == 0.0f) return;  // a skipped step
    // bias corrections in double: 1 - beta^step loses digits in float for beta2 close to 1
    float bc1 = (float)(1.0 - pow((double)beta1, (double)step));
    float bc2 = (float)(1.0 - pow((double)beta2, (double)step));
    long nv = 0;  // elements done 8 at a time
#if defined(__AVX__)
    nv = n / 8 * 8;
#pragma omp parallel for schedule(static)
    for (long i = 0; i < nv; i += 8) {
        __m256 g = _mm256_mul_ps(_mm256_loadu_ps(grad + i), _mm256_set1_ps(grad_scale));
        __m256 mi = _mm256_add_ps(_mm256_mul_ps(_mm256_set1_ps(beta1), _mm256_loadu_ps(m + i)),
                                  _mm256_mul_ps(_mm256_set1_ps(1.0f - beta1), g));
        __m256 vi = _mm256_add_ps(_mm256_mul_ps(_mm256_set1_ps(beta2), _mm256_loadu_ps(v + i)),
                                  _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(1.0f - beta2), g), g));
        _mm256_storeu_ps(m + i, mi);
        _mm256_storeu_ps(v + i, vi);
        __m256 mhat = _mm256_div_ps(mi, _mm256_set1_ps(bc1)), vhat = _mm256_div_ps(vi, _mm256_set1_ps(bc2));
        __m256 p = _mm256_loadu_ps(param + i);
        __m256 upd = _mm256_add_ps(_mm256_div_ps(mhat, _mm256_add_ps(_mm256_sqrt_ps(vhat), _mm256_set1_ps(eps))),
                                   _mm256_mul_ps(_mm256_set1_ps(weight_decay), p));
        _mm256_storeu_ps(param + i, _mm256_sub_ps(p, _mm256_mul_ps(_mm256_set1_ps(lr), upd)));
    }
#endif
    for (long i = nv; i < n; i++) {
        float g = grad[i] * grad_scale;
        float mi = beta1 * m[i] + (1.0f - beta1) * g;
        float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
        m[i] = mi;
        v[i] = vi;
        float mhat = mi / bc1, vhat = vi / bc2;
        param[i] -= lr * (mhat / (sqrtf(vhat) + eps) + weight_decay * param[i]);
    }
}

void ct_clip_factor(float *scale, const double *scalars, double max_norm) {
    double loss_sum = scalars[0], norm = sqrt(scalars[1]);
    double clip = (max_norm > 0 && norm > max_norm) ? max_norm / (norm + 1e-6) : 1.0;
    *scale = isfinite(loss_sum) && isfinite(norm) ? (float)clip : 0.0f;
}
