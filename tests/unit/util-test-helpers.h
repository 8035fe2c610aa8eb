/*
 * Helpers shared by the util layer's test programs (test-util.c,
 * test-opts.c): the boolean spellings the option parsers accept, and a
 * check of what an error message says.  Header-only.  Any thread.
 */
#ifndef TESTS_UNIT_UTIL_TEST_HELPERS_H
#define TESTS_UNIT_UTIL_TEST_HELPERS_H

#include <stdbool.h>
#include <string.h>
#include <glib.h>
#include "util/error.h"

/* What parse_bool() (and so every boolean option) accepts. */
static const struct {
    const char *text;
    bool value;
} bool_spellings[] = {
    { "on", true }, { "yes", true }, { "true", true },
    { "off", false }, { "no", false }, { "false", false },
};

/*
 * Assert that err is set and that its message mentions each non-NULL word
 * (a user must be able to tell from it what was wrong).  err stays set.
 */
static inline void assert_error_mentions(Error *err, const char *word1,
                                         const char *word2)
{
    const char *words[] = { word1, word2 };

    g_assert_nonnull(err);
    g_assert_nonnull(error_get_pretty(err));
    for (size_t i = 0; i < G_N_ELEMENTS(words); i++) {
        if (words[i] && !strstr(error_get_pretty(err), words[i])) {
            g_test_message("error \"%s\" does not mention \"%s\"",
                           error_get_pretty(err), words[i]);
            g_assert_not_reached();
        }
    }
}

#endif
