#include "model/sampler.h"

#include <math.h>
#include <stdlib.h>

#include "core/error.h"

void ct_sampler_init(ct_sampler *s, long V, float temperature, int top_k, uint64_t seed) {
    s->V = V;
    s->temperature = temperature;
    s->top_k = (top_k <= 0 || top_k >= V) ? 0 : top_k;
    ct_rng_seed(&s->rng, seed);
    s->heap = s->top_k ? ct_xmalloc((size_t)s->top_k * sizeof(int32_t)) : NULL;
    s->prob = ct_xmalloc((size_t)V * sizeof(double));
}

void ct_sampler_free(ct_sampler *s) {
    free(s->heap);
    free(s->prob);
    s->heap = NULL;
    s->prob = NULL;
}

// a ranks above b: larger logit, or the lower id on a tie (so selection never depends on order).
static int better(const float *logits, int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
}

static void sift_down(int32_t *h, int n, int i, const float *logits) {
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && better(logits, h[m], h[l])) m = l;  // the heap's root is the worst kept id
        if (r < n && better(logits, h[m], h[r])) m = r;
        if (m == i) return;
        int32_t t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
}

static void sift_up(int32_t *h, int i, const float *logits) {
    while (i > 0) {
        int p = (i - 1) / 2;
        if (!better(logits, h[p], h[i])) return;
        int32_t t = h[i];
        h[i] = h[p];
        h[p] = t;
        i = p;
    }
}

int32_t ct_sampler_sample(ct_sampler *s, const float *logits) {
    long V = s->V;
    if (s->temperature <= 0) {
        int32_t best = 0;
        for (int32_t i = 1; i < V; i++)
            if (better(logits, i, best)) best = i;
        return best;
    }
    // Candidates: the top_k ids (heap order), or all of them.
    const int32_t *cand = NULL;
    long n = V;
    if (s->top_k) {
        int k = 0;
        for (int32_t i = 0; i < V; i++) {
            if (k < s->top_k) {
                s->heap[k] = i;
                sift_up(s->heap, k++, logits);
            } else if (better(logits, i, s->heap[0])) {
                s->heap[0] = i;
                sift_down(s->heap, k, 0, logits);
            }
        }
        cand = s->heap;
        n = k;
    }
    // softmax(logits / T) over the candidates, shifted by the max so exp never overflows.
    float mx = -INFINITY;
    for (long j = 0; j < n; j++) {
        float l = logits[cand ? cand[j] : j];
        if (l > mx) mx = l;
    }
    double sum = 0;
    for (long j = 0; j < n; j++) {
        double p = exp(((double)logits[cand ? cand[j] : j] - mx) / s->temperature);
        s->prob[j] = p;
        sum += p;
    }
    double u = (double)ct_rng_next_float(&s->rng) * sum, acc = 0;
    for (long j = 0; j < n; j++) {
        acc += s->prob[j];
        if (u < acc) return cand ? cand[j] : (int32_t)j;
    }
    // Rounding left u at the very top: the last candidate with non-zero probability.
    for (long j = n - 1; j > 0; j--)
        if (s->prob[j] > 0) return cand ? cand[j] : (int32_t)j;
    return cand ? cand[0] : 0;
}
