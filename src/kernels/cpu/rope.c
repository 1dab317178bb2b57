// Rotary position embedding (Su et al. 2021) in Meta's Llama convention: adjacent pairs
// (x[2i], x[2i+1]) are rotated by angle(p, i) = p * freq_i, with Llama 3.1's long-context
// frequency scaling (Meta's apply_scaling) when scale_factor > 0.
#include <math.h>

#include "kernels/cpu/rope_row.h"
#include "kernels/kernels.h"

void ct_rope_tables(float *cos_tab, float *sin_tab, long max_T, long HS, double theta, double scale_factor,
                    double low_freq_factor, double high_freq_factor, long original_max_pos) {
    long half = HS / 2;
    double low_freq_wavelen = (double)original_max_pos / low_freq_factor;
    double high_freq_wavelen = (double)original_max_pos / high_freq_factor;
    for (long i = 0; i < half; i++) {
        double freq = pow(theta, -2.0 * (double)i / (double)HS);
        if (scale_factor > 0) {
            double wavelen = 2.0 * M_PI / freq;
            if (wavelen < high_freq_wavelen) {
                // high frequencies (short wavelengths) are kept
            } else if (wavelen > low_freq_wavelen) {
                freq = freq / scale_factor;  // low frequencies are stretched by the factor
            } else {                         // in between: interpolate smoothly
                double smooth = ((double)original_max_pos / wavelen - low_freq_factor) /
                                (high_freq_factor - low_freq_factor);
                freq = (1.0 - smooth) * freq / scale_factor + smooth * freq;
            }
        }
        for (long p = 0; p < max_T; p++) {
            double a = (double)p * freq;
            cos_tab[p * half + i] = (float)cos(a);
            sin_tab[p * half + i] = (float)sin(a);
        }
    }
}

// dir = +1 rotates by +angle (forward), -1 by -angle (the inverse = transpose, for backward).
static void rope_apply(float *x, const float *cos_tab, const float *sin_tab, const int32_t *pos, long pos_ld, long B,
                       long T, long H, long HS, long ld, float dir) {
    long half = HS / 2;
#pragma omp parallel for collapse(2) schedule(static)
    for (long b = 0; b < B; b++)
        for (long t = 0; t < T; t++) {
            long p = pos ? (long)pos[b * pos_ld + t] : t;
            const float *cs = cos_tab + p * half, *sn = sin_tab + p * half;  // (HS/2)
            ct_rope_row(x + (b * T + t) * ld, H, HS, cs, sn, dir);            // (H, HS)
        }
}

void ct_rope_forward(float *x, const float *cos_tab, const float *sin_tab, const int32_t *pos, long pos_ld, long B,
                     long T, long H, long HS, long ld) {
    rope_apply(x, cos_tab, sin_tab, pos, pos_ld, B, T, H, HS, ld, 1.0f);
}

void ct_qkv_rope_to_bf16(uint16_t *qkv16, const float *qkv, const float *cos_tab, const float *sin_tab,
                         const int32_t *pos, long pos_ld, long B, long T, long NH, long NKV, long HS) {
    const long half = HS / 2, QKV = (NH + 2 * NKV) * HS;
#pragma omp parallel for collapse(2) schedule(static)
    for (long b = 0; b < B; b++)
        for (long t = 0; t < T; t++) {
            long p = pos ? (long)pos[b * pos_ld + t] : t;
            const float *cs = cos_tab + p * half, *sn = sin_tab + p * half;  // (HS/2)
            long n = b * T + t;
            ct_qkv_rope_row_to_bf16(qkv16 + n * QKV, qkv + n * QKV, NH, NKV, HS, cs, sn);  // (QKV)
        }
}

void ct_rope_backward(float *dx, const float *cos_tab, const float *sin_tab, const int32_t *pos, long pos_ld, long B,
                      long T, long H, long HS, long ld) {
    rope_apply(dx, cos_tab, sin_tab, pos, pos_ld, B, T, H, HS, ld, -1.0f);
}
