#!/usr/bin/env bash
# ct_fast_expf / ct_fast_expf_v8 / _v16 (src/kernels/cpu/fastmath.h) on NaN, +-inf and ordinary values,
# compiled with UndefinedBehaviorSanitizer (float-cast-overflow is not in -fsanitize=undefined,
# so it is named): NaN in gives NaN out, and no operation on the way is undefined (a NaN once
# reached the float -> int conversion and the left shift of the exponent).
set -u
cd "$(dirname "$0")/.."
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/drv.c" <<'C'
#include <math.h>
#include <stdio.h>
#include "kernels/cpu/fastmath.h"
int main(void) {
    volatile float in[8] = {NAN, -NAN, INFINITY, -INFINITY, 0.0f, 1.0f, -100.0f, 100.0f};
    float x[8];
    for (int i = 0; i < 8; i++) x[i] = in[i];
    ct_v8f v = ct_fast_expf_v8(ct_v8f_load(x));
    int bad = 0;
    for (int i = 0; i < 8; i++) {
        float s = ct_fast_expf(x[i]);
        float want = isnan(x[i]) ? NAN : x[i] == -INFINITY || x[i] == -100.0f ? 0.0f
                     : x[i] == INFINITY || x[i] == 100.0f ? INFINITY : expf(x[i]);
        // finite results within the documented 1.5 ulp; the 8-lane version has the scalar's bits
        int ok = isnan(want) ? isnan(s) && isnan(v[i])
                 : (isinf(want) || want == 0 ? s == want : fabsf(s - want) <= 2e-7f * want) && v[i] == s;
        if (!ok) printf("  x=%g: scalar %g, v8 %g, want %g\n", x[i], s, v[i], want), bad++;
    }
#ifdef CT_V16  // (AVX-512 builds) the 16-lane version has the scalar's bits too
    float x16[16];
    for (int i = 0; i < 16; i++) x16[i] = in[i % 8] * (i < 8 ? 1.0f : 0.5f);
    ct_v16f w = ct_fast_expf_v16(ct_v16f_load(x16));
    for (int i = 0; i < 16; i++) {
        float s = ct_fast_expf(x16[i]);
        if (!(isnan(s) ? isnan(w[i]) : w[i] == s)) printf("  x=%g: scalar %g, v16 %g\n", x16[i], s, w[i]), bad++;
    }
#endif
    return bad != 0;
}
C
cc=${CC_UBSAN:-gcc}
if ! $cc -std=c11 -O1 -march=native -Isrc -fsanitize=undefined,float-cast-overflow -fno-sanitize-recover=all \
     "$tmp/drv.c" -o "$tmp/drv" -lm >"$tmp/cc.log" 2>&1; then
  echo "SKIP fastmath_nan_no_undefined_behaviour: $cc cannot build with UBSan: $(head -1 "$tmp/cc.log")"
  exit 0
fi
if out=$("$tmp/drv" 2>&1); then echo "PASS fastmath_nan_no_undefined_behaviour"
else echo "FAIL fastmath_nan_no_undefined_behaviour: $out" | head -5; fi
