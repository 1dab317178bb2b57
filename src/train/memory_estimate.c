#include "train/memory_estimate.h"

#include <stdio.h>
#include <string.h>

ct_memory_estimate ct_memory_estimate_rank(const ct_llama_config *m, const ct_config *c, int pp, int tp, int shard,
                                           int cp) {
    ct_memory_estimate e = {0};
    double P = (double)ct_llama_num_params(m);
    double share = P / ((double)pp * tp * shard);
    e.params = 4.0 * share;
    e.grads = 4.0 * share;
    e.optimizer = 8.0 * share;  // AdamW m and v
    double C = m->dim, F = m->ffn_hidden, L = (double)m->n_layers / pp;
    double layer = (C * m->n_heads * m->head_dim + 2 * C * m->n_kv_heads * m->head_dim + m->n_heads * m->head_dim * C +
                    3 * C * F + 2 * C) / tp;
    e.gathered = shard > 1 ? 2 * 4.0 * layer : 0.0;  // two layer groups whole at once, fp32 slots
    // Kept for backward per token and layer (fp32): norms, q/k/v, attention output, the two FFN
    // inputs and SwiGLU's output, the residual: about 6 C + 3 F, split by tp where the matmuls are.
    double seqs = c->pipeline_microbatch_size > 0 ? c->pipeline_microbatch_size : c->micro_batch_size;
    double tokens = seqs * (double)c->seq_len / cp;
    double in_flight = pp > 1 ? pp : 1;  // 1F1B keeps up to pp micro-batches' activations
    e.activations = 4.0 * tokens * L * (6 * C + 3 * F / tp) * in_flight + 4.0 * tokens * C * 4;
    e.total = e.params + e.grads + e.optimizer + e.gathered + e.activations;
    return e;
}

double ct_memory_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    double kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lf kB", &kb) == 1) break;
    fclose(f);
    return kb * 1024.0;
}
