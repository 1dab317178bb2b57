#include "train/adamw.h"

#include <string.h>

#include "core/memory.h"
#include "core/trace.h"

void ct_adamw_init(ct_adamw *opt, const ct_kernels *k, long n, double beta1, double beta2, double eps,
                   double weight_decay) {
    memset(opt, 0, sizeof *opt);
    opt->n = n;
    opt->m = ct_mem_alloc_on(ct_kernels_device(k), CT_MEM_OPTIM, (size_t)n * sizeof(float));
    opt->v = ct_mem_alloc_on(ct_kernels_device(k), CT_MEM_OPTIM, (size_t)n * sizeof(float));
    k->zero(opt->m, (size_t)n * sizeof(float));  // device memory is not zeroed
    k->zero(opt->v, (size_t)n * sizeof(float));
    opt->beta1 = (float)beta1;
    opt->beta2 = (float)beta2;
    opt->eps = (float)eps;
    opt->weight_decay = (float)weight_decay;
}

void ct_adamw_free(ct_adamw *opt) {
    ct_mem_free(opt->m);
    ct_mem_free(opt->v);
    memset(opt, 0, sizeof *opt);
}

void ct_adamw_step(ct_adamw *opt, const ct_kernels *k, float *params, const float *grads, double lr,
                   const float *grad_scale) {
    opt->step++;
    int span = ct_trace_begin(CT_TRACE_KERNEL, "adamw.update");  // profiling: inside the trainer's "optimizer"
    k->adamw_update(params, grads, opt->m, opt->v, opt->n, (float)lr, opt->beta1, opt->beta2, opt->eps,
                    opt->weight_decay, opt->step, grad_scale);
    ct_trace_end(span);
}

void ct_adamw_unstep(ct_adamw *opt) { opt->step--; }
