// Errors. A function that can fail returns a status and leaves a message (ct_set_error);
// a fatal error goes through ct_fatal, which prints "[rank R] where: what" and ends the whole
// job (MPI_Abort when MPI is running, so no rank is left waiting in a collective).
#ifndef CT_ERROR_H
#define CT_ERROR_H
#include <stddef.h>

typedef enum { CT_OK = 0, CT_ERR = 1 } ct_status;

// Formats a message into the thread's last-error buffer and returns CT_ERR.
ct_status ct_set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
const char *ct_last_error(void);

// Prints "[rank R] where: what" (or "where: what" outside MPI) to stderr and ends the job.
_Noreturn void ct_fatal(const char *where, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

// Checked allocation helpers for set-up code (never in the training step).
void *ct_xmalloc(size_t n);
void *ct_xcalloc(size_t count, size_t size);
char *ct_xstrdup(const char *s);
#endif
