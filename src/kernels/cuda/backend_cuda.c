// The cuda backend's table, its memory functions and the device allocator it lends core/memory.
// Device buffers come from cudaMalloc, one per ct_mem_alloc_on call, accounted by category on
// the device (cuda:<ordinal>) exactly as host buffers are. The issue asks for an arena per
// category; with every long-lived buffer allocated once at start-up, an arena would only
// repackage the same cudaMalloc calls, so phase 1 does not build one (cudaMalloc is slow, but
// never in the step).
#include "kernels/cuda/backend_cuda.h"

#include <cuda_runtime_api.h>

#include "core/error.h"
#include "core/memory.h"
#include "kernels/cuda/cuda_kernels.h"

void ct_cuda_check(cudaError_t e, const char *what) {
    if (e != cudaSuccess) ct_fatal("cuda", "%s: %s", what, cudaGetErrorString(e));
}

void ct_cuda_launched(const char *what) { ct_cuda_check(cudaGetLastError(), what); }

ct_device ct_cuda_device(void) {
    int d = 0;
    ct_cuda_check(cudaGetDevice(&d), "cudaGetDevice");
    return (ct_device){CT_DEVICE_CUDA, d};
}

// ---- the allocator lent to core/memory
static void *dev_alloc(int index, size_t bytes) {
    int cur = 0;
    ct_cuda_check(cudaGetDevice(&cur), "cudaGetDevice");
    if (cur != index) ct_cuda_check(cudaSetDevice(index), "cudaSetDevice");
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes);
    if (cur != index) ct_cuda_check(cudaSetDevice(cur), "cudaSetDevice");
    if (e == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();  // clear it: ct_mem's out-of-memory path reports the request
        return NULL;
    }
    ct_cuda_check(e, "cudaMalloc");
    return p;
}

static void dev_free(int index, void *p) { ct_cuda_check(cudaFree(p), "cudaFree"); }

static const ct_mem_device_allocator cuda_allocator = {dev_alloc, dev_free};

void ct_cuda_backend_init(void) { ct_mem_set_device_allocator(CT_DEVICE_CUDA, &cuda_allocator); }

// ---- memory functions: all on the compute stream; copies to and from the host are synchronous
void ct_cuda_zero(void *dst, size_t bytes) {
    if (bytes) ct_cuda_check(cudaMemsetAsync(dst, 0, bytes, 0), "cudaMemsetAsync (zero)");
}
void ct_cuda_copy(void *dst, const void *src, size_t bytes) {
    if (bytes && dst != src)
        ct_cuda_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, 0), "cudaMemcpyAsync (copy)");
}
void ct_cuda_copy_2d(void *dst, size_t dst_pitch, const void *src, size_t src_pitch, size_t row_bytes, long rows) {
    if (row_bytes && rows > 0)
        ct_cuda_check(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, row_bytes, (size_t)rows,
                                        cudaMemcpyDeviceToDevice, 0), "cudaMemcpy2DAsync (copy_2d)");
}
void ct_cuda_synchronize(void) { ct_cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); }
void ct_cuda_to_host(void *host_dst, const void *src, size_t bytes) {
    if (bytes) ct_cuda_check(cudaMemcpy(host_dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy (to host)");
}
void ct_cuda_from_host(void *dst, const void *host_src, size_t bytes) {
    if (bytes) ct_cuda_check(cudaMemcpy(dst, host_src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy (from host)");
}

static void *small_buf;
static size_t small_bytes;

void *ct_cuda_small_buffer(size_t bytes) {
    if (bytes <= small_bytes) return small_buf;
    if (small_buf) {
        ct_cuda_check(cudaFree(small_buf), "cudaFree (small buffer)");
        ct_mem_record_on(ct_cuda_device(), CT_MEM_OTHER, -(long long)small_bytes);
    }
    size_t want = bytes < 4096 ? 4096 : bytes;
    ct_cuda_check(cudaMalloc(&small_buf, want), "cudaMalloc (small buffer)");
    ct_mem_record_on(ct_cuda_device(), CT_MEM_OTHER, (long long)want);
    small_bytes = want;
    return small_buf;
}
