#include "core/device.h"

#include <stdio.h>

const char *ct_device_kind_name(ct_device_kind k) {
    static const char *const names[CT_DEVICE_NKINDS] = {[CT_DEVICE_CPU] = "cpu", [CT_DEVICE_CUDA] = "cuda",
                                                          [CT_DEVICE_SIM] = "cpu_sim"};
    return (unsigned)k < CT_DEVICE_NKINDS ? names[k] : "?";
}

int ct_device_format(ct_device d, char *buf, size_t n) {
    if (d.kind == CT_DEVICE_CPU) return snprintf(buf, n, "%s", ct_device_kind_name(d.kind));
    return snprintf(buf, n, "%s:%d", ct_device_kind_name(d.kind), d.index);
}
