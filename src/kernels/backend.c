// Backend lookup by name: the one place that knows which backends this build has.
#include "kernels/backend.h"

#include <string.h>

#include "kernels/cpu/backend_cpu.h"

const ct_kernels *ct_kernels_get(const char *name) {
    if (name && strcmp(name, ct_kernels_cpu.name) == 0) return &ct_kernels_cpu;
    return NULL;  // "cuda" joins here when its backend is built
}
