// Element types: ONE enum for every module that names a type -- kernels, communication,
// checkpoints and model files -- so a buffer's dtype means the same thing wherever it travels.
// Sizes are in bits where a type is narrower than a byte would allow (none yet: fp4 would be).
#ifndef CT_DTYPE_H
#define CT_DTYPE_H
#include <stddef.h>

typedef enum {
    CT_F32 = 0,   // IEEE binary32
    CT_BF16,      // bfloat16: f32's top 16 bits (8-bit exponent, 7-bit mantissa)
    CT_F16,       // IEEE binary16
    CT_F8_E4M3,   // OCP float8 e4m3 (fn: no infinities, max 448)
    CT_F8_E5M2,   // OCP float8 e5m2 (max 57344)
    CT_E8M0,      // OCP MX scale: an 8-bit power of two, 2^(x - 127); 0xFF is NaN
    CT_F64,       // double (metrics, reductions)
    CT_I64,       // int64_t (token counts)
    CT_I32,       // int32_t (token ids)
    CT_I16,
    CT_I8,
    CT_U8,        // raw bytes
    CT_BOOL,
    CT_NDTYPES
} ct_dtype;

size_t ct_dtype_size(ct_dtype d);        // bytes per element; 0 for an unknown value
const char *ct_dtype_name(ct_dtype d);   // "f32", "bf16", "f8_e4m3", ...; "?" when unknown
#endif
