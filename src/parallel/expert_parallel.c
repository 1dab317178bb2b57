#include "parallel/expert_parallel.h"

#include <stdlib.h>

static void exchange_counts(void *ctx, const int64_t *send, int64_t *recv, long per_peer) {
    ct_comm_all_to_all(ctx, send, recv, (size_t)per_peer, CT_I64);
}

static void exchange_rows(void *ctx, const float *send, const size_t *send_rows, const size_t *send_at, float *recv,
                          const size_t *recv_rows, const size_t *recv_at, long C) {
    ct_group *g = ctx;
    size_t n = (size_t)g->size, *e = calloc(4 * n, sizeof(size_t));  // the same in elements
    if (!e) ct_fatal("expert_parallel", "out of memory for %zu counts", n);
    for (size_t p = 0; p < n; p++) {
        e[p] = send_rows[p] * (size_t)C, e[n + p] = send_at[p] * (size_t)C;
        e[2 * n + p] = recv_rows[p] * (size_t)C, e[3 * n + p] = recv_at[p] * (size_t)C;
    }
    ct_comm_all_to_all_v(g, send, e, e + n, recv, e + 2 * n, e + 3 * n, CT_F32);
    free(e);
}

ct_moe_ep_ops ct_expert_parallel_ops(ct_group *g) {
    return (ct_moe_ep_ops){.size = g->size, .rank = g->rank, .exchange_counts = exchange_counts,
                           .exchange_rows = exchange_rows, .ctx = g};
}
