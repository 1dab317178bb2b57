// Errors. A function that can fail returns a status and leaves a message (ct_set_error);
// a fatal error goes through ct_fatal, which prints "[rank R] where: what" and ends the whole
// job, so no process is left waiting in a collective for one that died.
//
// core/ knows nothing of MPI or NCCL: whoever starts a multi-process job (comm/) registers an
// abort hook that tells ct_fatal this process's rank, the job's size, and how to end every
// process. Without a hook a process is a job of one and ct_fatal simply exits.
#ifndef CT_ERROR_H
#define CT_ERROR_H
#include <stdbool.h>
#include <stddef.h>

typedef enum { CT_OK = 0, CT_ERR = 1 } ct_status;

// What kind of failure the last error is, so that callers and tests decide by kind and subject
// instead of searching the message's text.
typedef enum {
    CT_E_NONE,      // no kind given (ct_set_error with a message that wraps no earlier one)
    CT_E_CONFIG,    // a setting's value, or settings that contradict each other; subject: the setting
    CT_E_DATA,      // a file opened but its contents are wrong (format, checksum, sizes); subject: the file
    CT_E_IO,        // a file or folder could not be opened, read, written or removed; subject: the path
    CT_E_COMM,      // a collective, a peer or the transport failed or timed out
    CT_E_NUMERIC,   // a non-finite or out-of-range number in the computation
    CT_E_MEMORY,    // an allocation failed, or a plan does not fit the memory there is
    CT_E_INTERNAL,  // an invariant of ctitan itself does not hold
} ct_error_code;

// "none", "config", "data", "io", "comm", "numeric", "memory", "internal".
const char *ct_error_code_name(ct_error_code code);

// Formats a message into the thread's last-error buffer and returns CT_ERR. The arguments may
// include ct_last_error() itself (wrapping a message with more context): a message that wraps
// the previous one keeps its code and subject, any other has code CT_E_NONE and no subject.
ct_status ct_set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
// The same with a code; the subject is kept when the message wraps the previous one.
ct_status ct_set_error_code(ct_error_code code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
// The same with a code and the subject the message is about: a setting's dotted name
// ("parallelism.pipeline_degree") or a file's path, kept as one line of printable text as the
// message is (NULL: none).
ct_status ct_set_error_at(ct_error_code code, const char *subject, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
const char *ct_last_error(void);
ct_error_code ct_last_error_code(void);
const char *ct_last_error_subject(void);  // "" when the last error names none

// Copies src into dst (cap bytes, always NUL-terminated) as one line of printable text, escaped as
// ct_set_error escapes its messages (control characters as \n, \xNN, ...; bad UTF-8 as \xNN).
void ct_error_escape(char *dst, size_t cap, const char *src);

// Whether ct_last_error() is a message every process of the job holds (comm/ marks one it handed
// every rank), so that each may end on its own and one of them print it. The mark survives
// wrapping: a message set by ct_set_error that contains the marked one (or, cut at the buffer's
// end, starts to) keeps it, however many callers add their context on the way up; any other
// message clears it.
void ct_error_mark_shared(void);
bool ct_error_is_shared(void);

// How ct_fatal reaches the rest of the job. Each function may be called from any thread, at
// any moment (also while the job is being torn down), and must not call ct_fatal itself.
typedef struct {
    void *ctx;                              // passed back to every function
    int (*rank)(void *ctx);                 // this process's rank in the job
    int (*size)(void *ctx);                 // processes in the job; <= 1: nothing to abort
    void (*abort_job)(void *ctx, int code); // ends every process; may return if it cannot
} ct_abort_hook;

// Registers `h` (NULL: back to "a job of one"). The hook is kept by pointer, not copied, so
// that a concurrent ct_fatal never sees half of an old hook and half of a new one: `h` must
// outlive its registration (a static const table).
void ct_set_abort_hook(const ct_abort_hook *h);

// Prints "[rank R] where: what" (or "where: what" in a job of one) to stderr and ends the job:
// the hook's abort_job when the job has more than one process, then exit(1).
_Noreturn void ct_fatal(const char *where, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

// Checked allocation helpers for set-up code (never in the training step).
void *ct_xmalloc(size_t n);
void *ct_xcalloc(size_t count, size_t size);
char *ct_xstrdup(const char *s);
#endif
