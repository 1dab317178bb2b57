#include "core/dtype.h"

static const struct {
    const char *name;
    size_t size;
} info[CT_NDTYPES] = {
    [CT_F32] = {"f32", 4},         [CT_BF16] = {"bf16", 2},       [CT_F16] = {"f16", 2},
    [CT_F8_E4M3] = {"f8_e4m3", 1}, [CT_F8_E5M2] = {"f8_e5m2", 1}, [CT_E8M0] = {"e8m0", 1},
    [CT_F64] = {"f64", 8},         [CT_I64] = {"i64", 8},         [CT_I32] = {"i32", 4},
    [CT_I16] = {"i16", 2},         [CT_I8] = {"i8", 1},           [CT_U8] = {"u8", 1},
    [CT_BOOL] = {"bool", 1},
};

size_t ct_dtype_size(ct_dtype d) { return (unsigned)d < CT_NDTYPES ? info[d].size : 0; }
const char *ct_dtype_name(ct_dtype d) { return (unsigned)d < CT_NDTYPES ? info[d].name : "?"; }
