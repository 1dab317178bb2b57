// Backend lookup by name: the one place that knows which backends this build has.
#include "kernels/backend.h"

#include <string.h>

#include "kernels/cpu/kernel_set.h"
#include "kernels/sim/device_sim.h"
#ifdef CT_HAVE_CUDA
#include "kernels/cuda/backend_cuda.h"
#endif

const ct_kernels *ct_kernels_get(const char *name) {
    if (name && strcmp(name, "cpu") == 0) return ct_kernel_set_kernels();
    if (name && strcmp(name, "cpu_sim") == 0) {
        ct_sim_backend_init();  // lends core/memory the guarded allocator before any device buffer
        return &ct_kernels_sim;
    }
#ifdef CT_HAVE_CUDA
    if (name && strcmp(name, ct_kernels_cuda.name) == 0) {
        ct_cuda_backend_init();  // lends core/memory its device allocator before any cuda buffer
        return &ct_kernels_cuda;
    }
#endif
    return NULL;  // "cuda" only in a build with CUDA=1
}
