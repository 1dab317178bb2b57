// The AMX micro-kernel of ctitan's own bf16 gemm (the driver, its loops and its packing are
// gemm_bf16_avx512.c). Contracts in gemm_bf16_amx.h.
//
// A tile multiply, TDPBF16PS, adds a 16 x 32 bf16 A tile times a 32 x 16 bf16 B tile (held as 16
// rows of k pairs, the layout the driver's B slivers already have) into a 16 x 16 fp32 tile: 8,192
// multiply-adds in one instruction. The kernel keeps a 32 x 32 block of C in four accumulator
// tiles (0-3) and, for each 32 values of k, loads two A tiles (4, 5) and two B tiles (6, 7):
// 4 KiB read for 32,768 multiply-adds. Why its own rather than oneDNN's AMX kernels: Debian's oneDNN
// 2.6 reached 400-530 GFLOP/s on 2 cores on most of the model's linear shapes (1,000-1,300 on
// two of them), took a kernel without AMX for 2048^3, and allocates in every execution.
//
// Numerics: products of bf16 values are exact in fp32 and TDPBF16PS sums them in fp32, with
// denormal inputs and outputs flushed to zero (as VDPBF16PS does), in the tile's own order. C
// is written as beta C + alpha acc from the sum over the K block, whichever the tile's shape,
// so results do not depend on how rows are split between threads.
//
// Linux gives a process the AMX state only when asked (arch_prctl ARCH_REQ_XCOMP_PERM), once;
// each thread then loads a tile configuration (LDTILECFG) before its first tile instruction and
// releases it (TILERELEASE) when done, so that a context switch need not save 8 KiB of tiles.
#include "kernels/cpu/gemm_bf16_amx.h"

#include <pthread.h>
#include <string.h>

#if defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(__AVX512F__)
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

static int g_usable;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void ask_the_kernel(void) {
    g_usable = __builtin_cpu_supports("amx-bf16") && __builtin_cpu_supports("amx-tile") &&
               syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
}

int ct_bf16_amx_usable(void) {
    pthread_once(&g_once, ask_the_kernel);
    return g_usable;
}

// Palette 1: every one of the 8 tiles 16 rows of 64 bytes.
typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

// (A constant object rather than a local one filled in: GCC 12 does not see that LDTILECFG
// reads its operand, and dropped the stores into a local configuration, which then faulted.)
static const tile_config g_config __attribute__((aligned(64))) = {
    .palette = 1,
    .colsb = {64, 64, 64, 64, 64, 64, 64, 64},
    .rows = {16, 16, 16, 16, 16, 16, 16, 16},
};

void ct_bf16_amx_begin(void) { _tile_loadconfig(&g_config); }

void ct_bf16_amx_end(void) { _tile_release(); }

static inline __mmask16 lanes(long n) { return n >= 16 ? (__mmask16)0xffff : n <= 0 ? 0 : (__mmask16)((1u << n) - 1); }

void ct_bf16_amx_kernel(long mr, long kp, const uint16_t *a, const uint16_t *b, float *c, long ldc, float alpha,
                        float beta, long nr) {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (long q = 0; q < kp / 16; q++) {  // 32 values of k: A chunk 32 rows x 32, B 16 pairs x 32 x 2
        _tile_loadd(4, a + q * 1024, 64);
        _tile_loadd(5, a + q * 1024 + 512, 64);
        _tile_loadd(6, b + q * 1024, 128);
        _tile_loadd(7, b + q * 1024 + 32, 128);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    if (mr == 32 && nr == 32 && alpha == 1.0f && beta == 0.0f) {  // C = acc: straight from the tiles
        _tile_stored(0, c, ldc * 4);
        _tile_stored(1, c + 16, ldc * 4);
        _tile_stored(2, c + 16 * ldc, ldc * 4);
        _tile_stored(3, c + 16 * ldc + 16, ldc * 4);
        return;
    }
    float acc[32 * 32] __attribute__((aligned(64)));  // (32, 32) fp32, row-major
    _tile_stored(0, acc, 128);
    _tile_stored(1, acc + 16, 128);
    _tile_stored(2, acc + 16 * 32, 128);
    _tile_stored(3, acc + 16 * 32 + 16, 128);
    const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
    for (long r = 0; r < mr; r++)
        for (long h = 0; h < 2; h++) {
            __mmask16 m = lanes(nr - 16 * h);
            float *cv = c + r * ldc + 16 * h;
            __m512 v = _mm512_mul_ps(va, _mm512_load_ps(acc + r * 32 + 16 * h));
            if (beta == 1.0f)
                v = _mm512_add_ps(_mm512_maskz_loadu_ps(m, cv), v);
            else if (beta != 0.0f)  // (beta 0 never reads C: it may hold NaN garbage)
                v = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m, cv), v);
            _mm512_mask_storeu_ps(cv, m, v);
        }
}

#else  // no AMX in this build
int ct_bf16_amx_usable(void) { return 0; }
void ct_bf16_amx_begin(void) {}
void ct_bf16_amx_end(void) {}
void ct_bf16_amx_kernel(long mr, long kp, const uint16_t *a, const uint16_t *b, float *c, long ldc, float alpha,
                        float beta, long nr) {
    (void)mr, (void)kp, (void)a, (void)b, (void)c, (void)ldc, (void)alpha, (void)beta, (void)nr;
}
#endif
