// A cpu kernel set: the kernel files of src/kernels/cpu compiled once for one level of the x86-64
// instruction set, with their own table and functions. The Makefile's KSETS, lowest first:
//   avx2         x86-64-v3 (AVX2, FMA, BMI2): what every other object of the build targets
//   avx512       x86-64-v4 (AVX-512 F, BW, CD, DQ, VL)
//   avx512_bf16  x86-64-v4 + AVX-512 BF16 (VDPBF16PS: the bf16 matmuls' own kernel)
//   amx          x86-64-v4 + AVX-512 BF16 + AMX tiles (where Linux grants them)
// A NATIVE=1 build has one set, "native", for the machine it was built on.
//
// scripts/kernel_sets.sh gives a set's functions the suffix __SET (ct_gemm__avx2) and writes one
// stub per function under its plain name (ct_gemm) that jumps to the chosen set's; kernel_set.c
// chooses at start-up (CTITAN_KERNEL_SET, else the highest set the CPU runs) and again when a
// run's training.kernel_set asks (kernels/backend.h: ct_kernel_set_*). Inside a set calls go
// direct; a global variable that every set must share lives in a file outside the sets
// (KSET_SHARED), e.g. onednn_arena.c.
#ifndef CT_CPU_KERNEL_SET_H
#define CT_CPU_KERNEL_SET_H
#include "kernels/backend.h"

// What a set was compiled to use, as bits.
enum {
    CT_CPU_X86_64_V3 = 1 << 0,    // AVX, AVX2, BMI1/2, F16C, FMA, LZCNT, MOVBE
    CT_CPU_X86_64_V4 = 1 << 1,    // AVX-512 F, BW, CD, DQ, VL
    CT_CPU_AVX512_BF16 = 1 << 2,  // AVX-512 BF16
    CT_CPU_AMX_TILE = 1 << 3,
    CT_CPU_AMX_BF16 = 1 << 4,
};

typedef struct {
    const char *name;           // "avx2", "avx512", "avx512_bf16", "amx" or "native"
    unsigned needs;             // CT_CPU_* bits the compiler was allowed to use
    const ct_kernels *kernels;  // the set's table
} ct_cpu_kernel_set;

// The descriptor of the set a file is compiled into (backend_cpu.c; one per set after renaming).
extern const ct_cpu_kernel_set ct_cpu_kernel_set_this;

// The function a plain kernel name reaches now (the chosen set's), or NULL for an address that is
// not one of the stubs: CT_KERNEL_TARGET(ct_gemm) == ct_kernels_get("cpu")->gemm (tests).
const void *ct_kernel_set_target(const void *stub);
#define CT_KERNEL_TARGET(fn) ct_kernel_set_target((const void *)(fn))

// The name of the set whose function runs: through the plain name, the chosen set's (tests).
const char *ct_cpu_kernel_set_compiled(void);

// The CT_CPU_* bits this CPU has.
unsigned ct_cpu_features(void);

// The chosen set's table (ct_kernels_get("cpu")).
const ct_kernels *ct_kernel_set_kernels(void);
#endif
