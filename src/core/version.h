// ctitan's version: the release and, when built from a git checkout, the commit (the Makefile
// passes it in; "unknown" otherwise). Written into every run's run.toml, printed by --version.
#ifndef CT_VERSION_H
#define CT_VERSION_H
const char *ct_version(void);
#endif
