// Helpers for tests of code that runs on any device (the cpu, the test device cpu_sim, a GPU):
// memory counted wherever it lives, and device values read through the backend, never by a host
// pointer (under CTITAN_DEVICE=cpu_sim a host read of a device buffer ends the test).
#ifndef CT_TEST_DEVICE_TEST_H
#define CT_TEST_DEVICE_TEST_H
#include <stddef.h>

#include "core/memory.h"
#include "kernels/backend.h"

// Bytes of `cat` held now on the host and on device 0 of every other kind.
static inline size_t ct_test_mem_current(ct_mem_category cat) {
    size_t n = 0;
    for (int kind = 0; kind < CT_DEVICE_NKINDS; kind++) n += ct_mem_current_on((ct_device){(ct_device_kind)kind, 0}, cat);
    return n;
}

// n floats of device buffer src (on k's device) into host dst.
static inline void ct_test_read(const ct_kernels *k, float *dst, const float *src, long n) {
    k->copy_to_host(dst, src, (size_t)n * sizeof(float));
}
static inline float ct_test_read1(const ct_kernels *k, const float *src) {
    float v;
    k->copy_to_host(&v, src, sizeof v);
    return v;
}
#endif
