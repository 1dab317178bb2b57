// Counter-based random numbers. A value depends only on (key, index), never on call order,
// so a parameter element gets the same initial value whichever rank, shard or layout asks.
#ifndef CT_RNG_H
#define CT_RNG_H
#include <stdint.h>

uint64_t ct_hash_string(const char *s);                   // FNV-1a 64
uint64_t ct_rng_key(uint64_t seed, const char *name);     // mixes a seed and a name
uint64_t ct_rng_u64(uint64_t key, uint64_t index);        // splitmix64 of (key, index)
double ct_rng_uniform(uint64_t key, uint64_t index);      // in (0, 1)
double ct_rng_normal(uint64_t key, uint64_t index);       // standard normal (Box-Muller)

// Sequential generator for tests, sampling and data order (state passed explicitly).
typedef struct { uint64_t state; } ct_rng;
void ct_rng_seed(ct_rng *r, uint64_t seed);
uint64_t ct_rng_next(ct_rng *r);
float ct_rng_next_float(ct_rng *r);   // [0, 1)
float ct_rng_next_normal(ct_rng *r);
#endif
