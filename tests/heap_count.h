// Every malloc-family call in the process, counted: the steady-state allocation test, the trace
// test and bench_train include this once, in their main file. It interposes malloc, calloc,
// realloc, memalign, aligned_alloc and posix_memalign (glibc's __libc_* do the work), so the
// libraries' calls count too -- libgomp's, oneDNN's, MPI's. Under AddressSanitizer
// (make test SANITIZE=1) the sanitizer owns malloc, and a second definition here would hand its
// pointers to glibc's free: its allocation hook sees every call instead.
//
// The includer defines `static void heap_call_counted(void)` (called once per call, from any
// thread: update counters atomically) and calls heap_counting_start() first thing in main.
#ifndef CT_TEST_HEAP_COUNT_H
#define CT_TEST_HEAP_COUNT_H
#include <stddef.h>

static void heap_call_counted(void);

#if defined(__SANITIZE_ADDRESS__)
// (Declared in <sanitizer/allocator_interface.h>, which Debian's gcc does not install.)
int __sanitizer_install_malloc_and_free_hooks(void (*malloc_hook)(const volatile void *, size_t),
                                              void (*free_hook)(const volatile void *));
static void heap_on_alloc(const volatile void *p, size_t n) { heap_call_counted(); }
static void heap_on_free(const volatile void *p) {}
static void heap_counting_start(void) { __sanitizer_install_malloc_and_free_hooks(heap_on_alloc, heap_on_free); }
#else
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);
void *malloc(size_t n) {
    heap_call_counted();
    return __libc_malloc(n);
}
void *calloc(size_t a, size_t b) {
    heap_call_counted();
    return __libc_calloc(a, b);
}
void *realloc(void *p, size_t n) {
    heap_call_counted();
    return __libc_realloc(p, n);
}
void free(void *p) { __libc_free(p); }
void *memalign(size_t a, size_t n) {
    heap_call_counted();
    return __libc_memalign(a, n);
}
void *aligned_alloc(size_t a, size_t n) {
    heap_call_counted();
    return __libc_memalign(a, n);
}
int posix_memalign(void **p, size_t a, size_t n) {
    heap_call_counted();
    *p = __libc_memalign(a, n);
    return *p ? 0 : 12;  // ENOMEM
}
static void heap_counting_start(void) {}
#endif
#endif
