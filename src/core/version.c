#include "core/version.h"

#ifndef CT_GIT_COMMIT
#define CT_GIT_COMMIT "unknown"
#endif

const char *ct_version(void) { return "0.13.0 (" CT_GIT_COMMIT ")"; }
