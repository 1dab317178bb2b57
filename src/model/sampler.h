// Next-token sampling from a row of logits: greedy (temperature 0) or softmax(logits / T) over
// the top_k largest logits, drawn from a seeded sequential generator so a (seed, prompt) pair
// always produces the same text.
#ifndef CT_SAMPLER_H
#define CT_SAMPLER_H
#include <stdint.h>

#include "core/rng.h"

typedef struct {
    long V;             // logits considered: ids 0..V-1 (a tokenizer smaller than the model's
                        // vocabulary restricts sampling to the ids it can decode)
    float temperature;  // 0 = greedy (argmax, lowest id on ties)
    int top_k;          // <= 0 or >= V: the whole vocabulary
    ct_rng rng;
    int32_t *heap;      // (top_k) ids of the k largest logits, a min-heap by logit
    double *prob;       // (V) unnormalised probabilities
} ct_sampler;

void ct_sampler_init(ct_sampler *s, long V, float temperature, int top_k, uint64_t seed);
void ct_sampler_free(ct_sampler *s);
// Picks an id in [0, V) from logits (at least V floats).
int32_t ct_sampler_sample(ct_sampler *s, const float *logits);
#endif
