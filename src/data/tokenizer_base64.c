// Base64 (RFC 4648 standard alphabet, '=' padding), the encoding of token bytes in tiktoken
// rank files. Decoding is strict: length a multiple of 4, padding only at the end.
#include "data/tokenizer_internal.h"

static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

long ct_base64_encoded_len(long n) { return (n + 2) / 3 * 4; }

void ct_base64_encode(const uint8_t *in, long n, char *out) {
    long i = 0, o = 0;
    for (; i + 3 <= n; i += 3) {
        uint32_t w = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 | in[i + 2];
        out[o++] = alphabet[w >> 18 & 63];
        out[o++] = alphabet[w >> 12 & 63];
        out[o++] = alphabet[w >> 6 & 63];
        out[o++] = alphabet[w & 63];
    }
    if (n - i == 1) {
        uint32_t w = (uint32_t)in[i] << 16;
        out[o++] = alphabet[w >> 18 & 63];
        out[o++] = alphabet[w >> 12 & 63];
        out[o++] = '=';
        out[o++] = '=';
    } else if (n - i == 2) {
        uint32_t w = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8;
        out[o++] = alphabet[w >> 18 & 63];
        out[o++] = alphabet[w >> 12 & 63];
        out[o++] = alphabet[w >> 6 & 63];
        out[o++] = '=';
    }
    out[o] = 0;
}

static int value_of(char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

long ct_base64_decode(const char *in, long n, uint8_t *out) {
    if (n % 4) return -1;
    long o = 0;
    for (long i = 0; i < n; i += 4) {
        int last = i + 4 == n;
        int pad = 0;
        if (last && in[i + 3] == '=') pad = in[i + 2] == '=' ? 2 : 1;
        int v[4];
        for (int k = 0; k < 4 - pad; k++)
            if ((v[k] = value_of(in[i + k])) < 0) return -1;
        for (int k = 4 - pad; k < 4; k++) v[k] = 0;
        uint32_t w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
        out[o++] = (uint8_t)(w >> 16);
        if (pad < 2) out[o++] = (uint8_t)(w >> 8);
        if (pad < 1) out[o++] = (uint8_t)w;
    }
    return o;
}
