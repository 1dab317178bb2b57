// What the configuration's files share (internal to src/core/config*.c).
#ifndef CT_CONFIG_INTERNAL_H
#define CT_CONFIG_INTERNAL_H
#include <stddef.h>

#include "core/config.h"

// The field a setting describes inside a configuration.
static inline void *field_ptr(ct_config *c, const ct_setting *s) { return (char *)c + s->offset; }
static inline const void *field_cptr(const ct_config *c, const ct_setting *s) { return (const char *)c + s->offset; }

// The name of choice v of an enum or flag-list setting into out; 0 when v is not one of them.
int ct_setting_choice_name(const ct_setting *s, int v, char *out, size_t cap);
#endif
