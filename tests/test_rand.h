// The tests' random numbers: xorshift64 (Marsaglia), seeded by each test (rng_state = seed at the
// start of main, or per case) so a failure replays with the same numbers.
#ifndef CT_TEST_RAND_H
#define CT_TEST_RAND_H
#include <stdint.h>

static uint64_t rng_state;
static inline double urand(void) {  // uniform [0, 1)
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / 9007199254740992.0;
}
static inline float frand(float a) { return (float)((2.0 * urand() - 1.0) * a); }  // uniform [-a, a)
#endif
