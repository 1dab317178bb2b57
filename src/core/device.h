// Where a buffer lives. A device is a kind plus an index (GPU ordinal; 0 for the host), so
// memory accounting, tensors and backends can say which memory they mean.
#ifndef CT_DEVICE_H
#define CT_DEVICE_H
#include <stdbool.h>
#include <stddef.h>

// CT_DEVICE_SIM is the test device (kernels/sim): the cpu kernels on memory the host cannot read or
// write outside backend calls, so a host access to a device buffer crashes a test on the CPU
// instead of corrupting a GPU run.
typedef enum { CT_DEVICE_CPU = 0, CT_DEVICE_CUDA, CT_DEVICE_SIM, CT_DEVICE_NKINDS } ct_device_kind;

typedef struct {
    ct_device_kind kind;
    int index;  // GPU ordinal; 0 on the host
} ct_device;

#define CT_HOST ((ct_device){CT_DEVICE_CPU, 0})

const char *ct_device_kind_name(ct_device_kind k);  // "cpu", "cuda", "cpu_sim"; "?" when unknown

// Whether the host may read and write the device's memory directly (the cpu only).
static inline bool ct_device_host_visible(ct_device_kind k) { return k == CT_DEVICE_CPU; }

// Two devices are the same memory when kind and index agree.
static inline bool ct_device_equal(ct_device a, ct_device b) {
    return a.kind == b.kind && a.index == b.index;
}

// "cpu", "cuda:1" (the host has one memory, so its index is not shown). Like snprintf: writes
// at most n bytes, NUL-terminated, and returns the length it wanted.
int ct_device_format(ct_device d, char *buf, size_t n);
#endif
