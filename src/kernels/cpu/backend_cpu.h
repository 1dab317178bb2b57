// The cpu kernel backend (internal to src/kernels): its table, for ct_kernels_get, and the
// memory functions that have no kernels.h counterpart.
#ifndef CT_CPU_BACKEND_CPU_H
#define CT_CPU_BACKEND_CPU_H
#include <stddef.h>

#include "kernels/backend.h"

extern const ct_kernels ct_kernels_cpu;

// dst = 0 / dst = src over `bytes`, parallel for large sizes (memory_cpu.c)
void ct_cpu_zero(void *dst, size_t bytes);
void ct_cpu_copy(void *dst, const void *src, size_t bytes);
#endif
