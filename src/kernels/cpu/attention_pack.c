// The attention's packing: an item's Q^T and dO^T transposed into tiles, rows copied contiguous
// and padded to HP (a key tile's, or a whole kv head's K and V), and rows a token stride apart
// asked into cache ahead of their use. Each copies values, never changes one.
#include "kernels/cpu/attention_internal.h"

// dst (HS, BQ) = src^T for src (n, HS) with row stride ld; columns n..BQ-1 zero. Whole 8 x 8
// blocks go through registers (8 loads, 24 shuffles, 8 stores) where the ISA has them.
NO_LIBCALLS void ct_att_pack_t(float *restrict dst, const float *restrict src, long ld, long n, long HS) {
    long d0 = 0;
#if defined(__AVX2__)
    for (; d0 + 8 <= HS; d0 += 8) {
        long i = 0;
        for (; i + 8 <= n; i += 8) ct_transpose8(dst + d0 * CT_ATT_BQ + i, CT_ATT_BQ, src + i * ld + d0, ld);
        for (long d = d0; d < d0 + 8; d++)
            for (long r = i; r < CT_ATT_BQ; r++) dst[d * CT_ATT_BQ + r] = r < n ? src[r * ld + d] : 0.0f;
    }
#endif
    for (long d = d0; d < HS; d++)
        for (long r = 0; r < CT_ATT_BQ; r++) dst[d * CT_ATT_BQ + r] = r < n ? src[r * ld + d] : 0.0f;
}

// dst (n, w) = src (n, HS) with row stride ld; columns HS..w-1 zero. The source rows are a token
// stride apart (kilobytes), where the hardware prefetchers do not follow: each row is asked for
// CT_ATT_PACK_AHEAD rows ahead, and copied in whole vectors (the element loop with its column test
// did not vectorise). A 2-core Xeon with AMX, two threads, paired calls: bench S's shape
// forward 0.966, backward 0.970; bench M's forward 0.96. (The same for Q^T and dO^T in
// ct_att_pack_t: S 1.009, M 0.98 -- not kept.)
#define CT_ATT_PACK_AHEAD 8
NO_LIBCALLS void ct_att_pack_rows(float *restrict dst, long w, const float *restrict src, long ld, long n, long HS) {
    for (long i = 0; i < n; i++) {
        if (i + CT_ATT_PACK_AHEAD < n)
            for (long d = 0; d < HS; d += 16) __builtin_prefetch(src + (i + CT_ATT_PACK_AHEAD) * ld + d, 0, 3);
        const float *s = src + i * ld;
        float *o = dst + i * w;
        long d = 0;
#ifdef CT_V16
        for (; d + 16 <= HS; d += 16) ct_v16f_store(o + d, ct_v16f_load(s + d));
#endif
        for (; d < HS; d++) o[d] = s[d];
        for (; d < w; d++) o[d] = 0.0f;
    }
}

// Rows [0, Tk) of one kv head of x (row stride ld) into dst (Tk, HP), zero columns past HS.
static void copy_head(float *dst, const float *x, long ld, long Tk, long HS) {
    ct_att_pack_rows(dst, pad_hs(HS), x, ld, Tk, HS);
}

// The K and V rows of kv head c (batch c / NKV, head c % NKV) into kl, vl (Tk, HP) each.
void ct_att_copy_kv_head(float *kl, float *vl, const float *k, long ldk, const float *v, long ldv, long c, long NKV,
                         long Tk, long HS) {
    copy_head(kl, k + (c / NKV) * Tk * ldk + c % NKV * HS, ldk, Tk, HS);
    copy_head(vl, v + (c / NKV) * Tk * ldv + c % NKV * HS, ldv, Tk, HS);
}

// Asks for rows [0, n) of x (HS floats each, row stride ld) to be brought into cache ahead of
// use (rw 1: to be written). The rows are a leading dimension apart in the big (B, T, ...)
// tensors, so the hardware prefetchers do not fetch them; without this, perf put a third of
// the backward's own time (outside the products) on the loads of the dK / dV adds and of D,
// and a tenth of the forward's on the stores of O.
void ct_att_prefetch_rows(const float *x, long ld, long n, long HS, int rw) {
    for (long r = 0; r < n; r++)
        for (long d = 0; d < HS; d += 16) {
            if (rw)
                __builtin_prefetch(x + r * ld + d, 1, 3);
            else
                __builtin_prefetch(x + r * ld + d, 0, 3);
        }
}

// dK (nk, HS) += an item's dK share dkp (nk, HP), dV likewise (row strides ldk, ldv).
void ct_att_add_shares(float *dK, long ldk, float *dV, long ldv, const float *dkp, const float *dvp, long nk, long HS) {
    const long HP = pad_hs(HS);
    for (long r = 0; r < nk; r++) {
        float *dkr = dK + r * ldk, *dvr = dV + r * ldv;
        const float *kp = dkp + r * HP, *vp = dvp + r * HP;
        for (long d = 0; d < HS; d++) dkr[d] += kp[d], dvr[d] += vp[d];
    }
}

// rows (n, HS): dst (row stride ldd) = src (row stride lds).
void ct_att_copy_rows(float *dst, long ldd, const float *src, long lds, long n, long HS) {
    for (long r = 0; r < n; r++) memcpy(dst + r * ldd, src + r * lds, sizeof(float) * (size_t)HS);
}
