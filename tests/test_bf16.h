// bf16 rounding worked out on the bit pattern, for tests that need their own reference of it
// (round to nearest, ties to even; finite inputs).
#ifndef CT_TEST_BF16_H
#define CT_TEST_BF16_H
#include <stdint.h>
#include <string.h>

// x rounded to the nearest bf16 value, as an fp32
static inline float round_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    memcpy(&x, &u, 4);
    return x;
}
#endif
