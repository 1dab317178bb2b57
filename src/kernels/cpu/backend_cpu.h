// The cpu kernel backend (internal to src/kernels): the memory functions that have no kernels.h
// counterpart. Its table is one per kernel set (kernel_set.h: ct_kernel_set_kernels).
#ifndef CT_CPU_BACKEND_CPU_H
#define CT_CPU_BACKEND_CPU_H
#include <stddef.h>

#include "kernels/backend.h"

// dst = 0 / dst = src over `bytes`, parallel for large sizes (memory_cpu.c)
void ct_cpu_zero(void *dst, size_t bytes);
void ct_cpu_copy(void *dst, const void *src, size_t bytes);
void ct_cpu_copy_2d(void *dst, size_t dst_pitch, const void *src, size_t src_pitch, size_t row_bytes, long rows);
#endif
