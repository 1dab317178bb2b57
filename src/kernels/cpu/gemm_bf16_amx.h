// The AMX tile micro-kernel of ctitan's own bf16 gemm (kernels/cpu/gemm_bf16_amx.c), driven by
// the loops of gemm_bf16_avx512.c. Internal to src/kernels/cpu.
//
// Operand layouts (the driver packs them; kp, the k pairs of a K block, a multiple of 16, the
// pairs past K zero in both operands):
//   a: a 32-row A sliver, [kp / 16 chunks][32 rows][32 k] bf16 (rows past the matrix zero);
//   b: a 32-column B sliver, [kp pairs][32 columns][2] bf16 (VNNI pairs, as for VDPBF16PS).
#ifndef CT_CPU_GEMM_BF16_AMX_H
#define CT_CPU_GEMM_BF16_AMX_H
#include <stdint.h>

// Nonzero when this build has AMX and the CPU too, and Linux granted the process the tile state
// (asked once, on the first call).
int ct_bf16_amx_usable(void);

// Tile configuration of the calling thread: begin before its first kernel call of a gemm, end
// after its last (inside one OpenMP thread's share of the work).
void ct_bf16_amx_begin(void);
void ct_bf16_amx_end(void);

// C[0:mr, 0:nr] = alpha a b + beta C (beta 0: C not read), for mr, nr <= 32.
void ct_bf16_amx_kernel(long mr, long kp, const uint16_t *a, const uint16_t *b, float *c, long ldc, float alpha,
                        float beta, long nr);
#endif
