// Expecting an error the way a caller decides on one: first its code, then the setting or file it
// names (its subject), and only then fragments of the message a person reads.
#ifndef CT_TEST_EXPECT_ERROR_H
#define CT_TEST_EXPECT_ERROR_H
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "test.h"

// `call` must return CT_ERR leaving code `code`, subject `subject` (NULL: not checked; "": none)
// and a one-line message holding every fragment given after them.
#define EXPECT_ERROR(call, code, subject, ...)                                                          \
    do {                                                                                                \
        ct_status st_ = (call);                                                                         \
        CHECK(st_ == CT_ERR, "%s accepted", #call);                                                     \
        CHECK(ct_last_error_code() == (code), "%s: code %s, expected %s (%s)", #call,                   \
              ct_error_code_name(ct_last_error_code()), ct_error_code_name(code), ct_last_error());     \
        const char *subject_ = (subject);                                                               \
        CHECK(!subject_ || !strcmp(ct_last_error_subject(), subject_), "%s: subject '%s', expected '%s' (%s)", \
              #call, ct_last_error_subject(), subject_ ? subject_ : "", ct_last_error());               \
        const char *frags_[] = {__VA_ARGS__};                                                           \
        for (size_t f_ = 0; f_ < sizeof frags_ / sizeof frags_[0]; f_++)                                \
            CHECK(strstr(ct_last_error(), frags_[f_]), "%s: message \"%s\" lacks \"%s\"", #call,        \
                  ct_last_error(), frags_[f_]);                                                         \
        CHECK(!strchr(ct_last_error(), '\n'), "message is not one line");                               \
    } while (0)

// The same test for helpers that report and return instead of failing the case: 1 when the last
// error has `code`, subject `subject` (NULL: not checked) and a message holding `what`; else
// prints which of the three differs and returns 0.
static inline int error_is(ct_error_code code, const char *subject, const char *what) {
    if (ct_last_error_code() != code) {
        printf("  code %s, expected %s (%s)\n", ct_error_code_name(ct_last_error_code()), ct_error_code_name(code),
               ct_last_error());
        return 0;
    }
    if (subject && strcmp(ct_last_error_subject(), subject)) {
        printf("  subject '%s', expected '%s' (%s)\n", ct_last_error_subject(), subject, ct_last_error());
        return 0;
    }
    if (!strstr(ct_last_error(), what)) {
        printf("  message '%s' lacks '%s'\n", ct_last_error(), what);
        return 0;
    }
    return 1;
}
#endif
