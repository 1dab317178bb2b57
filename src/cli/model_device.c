#include "cli/model_device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/memory.h"

const ct_kernels *ct_cli_device(const char *cmd, const char *name) {
    if (!name) name = getenv("CTITAN_DEVICE");
    if (!name || !*name) name = "cpu";
    const ct_kernels *k = ct_kernels_get(name);
    if (!k) {
        bool cuda = !strcmp(name, "cuda");
        fprintf(stderr, "%s: --device %s: %s\n", cmd, name,
                cuda ? "this ctitan was built without CUDA (make CUDA=1)"
                     : "expected cpu, cpu_sim or cuda (a build with make CUDA=1)");
    }
    return k;
}

float *ct_cli_weights_on(const ct_kernels *k, float *block, long n) {
    if (ct_device_host_visible(k->device)) return block;
    float *d = ct_mem_alloc_on(ct_kernels_device(k), CT_MEM_PARAMS, (size_t)n * sizeof(float));
    k->copy_from_host(d, block, (size_t)n * sizeof(float));
    return d;
}

void ct_cli_weights_free(float *placed, const float *block) {
    if (placed != block) ct_mem_free(placed);
}
