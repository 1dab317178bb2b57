// Expecting an error the way a caller decides on one: first its code, then the setting or file it
// names (its subject), and only then fragments of the message a person reads.
#ifndef CT_TEST_EXPECT_ERROR_H
#define CT_TEST_EXPECT_ERROR_H
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
#endif
