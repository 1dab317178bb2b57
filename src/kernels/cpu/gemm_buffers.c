// ct_gemm's per-thread packing buffers (gemm_internal.h): allocated on a thread's first product,
// at fixed sizes (never grown, so a steady state makes no allocation), freed when the thread ends.
#include <pthread.h>
#include <stdlib.h>

#include "core/error.h"
#include "kernels/cpu/gemm_internal.h"

static pthread_key_t g_key;
static pthread_once_t g_key_once = PTHREAD_ONCE_INIT;
static _Thread_local ct_gemm_buffers *tl_buf;

static void free_buffers(void *p) {
    ct_gemm_buffers *b = p;
    free(b->apack);
    free(b->bpack);
    free(b);
}
static void make_key(void) {
    if (pthread_key_create(&g_key, free_buffers)) ct_fatal("ct_gemm", "pthread_key_create failed");
}

static void *alloc64(size_t bytes) {
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes)) ct_fatal("ct_gemm", "out of memory (%zu bytes of packing buffers)", bytes);
    return p;
}

ct_gemm_buffers *ct_gemm_thread_buffers(void) {
    if (tl_buf) return tl_buf;
    pthread_once(&g_key_once, make_key);
    ct_gemm_buffers *b = alloc64(sizeof *b);
    b->apack = alloc64(sizeof(float) * (CT_MC * CT_KC + CT_APACK_SLACK));
    b->bpack = alloc64(sizeof(float) * CT_BPACK_FLOATS);
    pthread_setspecific(g_key, b);
    tl_buf = b;
    return b;
}
