#include "core/rng.h"

#include <math.h>

uint64_t ct_hash_string(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ull;
    }
    return h;
}

static uint64_t splitmix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

uint64_t ct_rng_key(uint64_t seed, const char *name) { return splitmix64(seed ^ splitmix64(ct_hash_string(name))); }

uint64_t ct_rng_u64(uint64_t key, uint64_t index) { return splitmix64(key ^ splitmix64(index * 0xd1b54a32d192ed03ull)); }

double ct_rng_uniform(uint64_t key, uint64_t index) {
    // 53 random bits, shifted off zero so log() is safe.
    return ((double)(ct_rng_u64(key, index) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

double ct_rng_normal(uint64_t key, uint64_t index) {
    double u1 = ct_rng_uniform(key, 2 * index);
    double u2 = ct_rng_uniform(key, 2 * index + 1);
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

void ct_rng_seed(ct_rng *r, uint64_t seed) { r->state = splitmix64(seed ^ 0x5851f42d4c957f2dull); }

uint64_t ct_rng_next(ct_rng *r) {
    r->state += 0x9e3779b97f4a7c15ull;
    uint64_t x = r->state;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

float ct_rng_next_float(ct_rng *r) { return (float)((ct_rng_next(r) >> 40) * (1.0 / 16777216.0)); }

float ct_rng_next_normal(ct_rng *r) {
    double u1 = ((double)(ct_rng_next(r) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
    double u2 = ((double)(ct_rng_next(r) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
    return (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
}
