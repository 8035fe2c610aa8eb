/*
 * Strict parsing of values a user typed.  Every failure produces one
 * message that names the option or property and the accepted range, so the
 * caller never has to guess what went wrong.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include "util/cutils.h"

bool parse_int64_in_range(const char *name, const char *str, int64_t min,
                          int64_t max, int64_t *out, Error **errp)
{
    const char *p = str;
    char *end = NULL;
    long long v;

    if (!str) {
        error_setg(errp, "Parameter '%s' is missing a value", name);
        return false;
    }
    if (*p == '\0') {
        error_setg(errp, "Parameter '%s' expects an integer, got an empty "
                   "value", name);
        return false;
    }
    if (g_ascii_isspace(*p)) {      /* strtoll would skip it silently */
        error_setg(errp, "Parameter '%s' expects an integer, got '%s'",
                   name, str);
        return false;
    }
    errno = 0;
    /* Decimal, or hexadecimal with 0x: a leading 0 is not octal here. */
    if (p[0] == '0' && (p[1] == 'x' || p[1] == 'X')) {
        v = strtoll(p, &end, 16);
    } else {
        v = strtoll(p, &end, 10);
    }
    if (end == p || *end != '\0') {
        error_setg(errp, "Parameter '%s' expects an integer, got '%s'",
                   name, str);
        return false;
    }
    if (errno == ERANGE || v < min || v > max) {
        error_setg(errp, "Parameter '%s' expects an integer from %" PRId64
                   " to %" PRId64 ", got '%s'", name, min, max, str);
        return false;
    }
    *out = v;
    return true;
}

bool id_chars_valid(const char *str)
{
    for (const char *p = str; *p; p++) {
        if (!g_ascii_isalnum(*p) && !strchr("-._", *p)) {
            return false;
        }
    }
    return true;
}

bool parse_bool(const char *name, const char *str, bool *out, Error **errp)
{
    static const char *const yes[] = { "on", "yes", "true", NULL };
    static const char *const no[] = { "off", "no", "false", NULL };

    for (int i = 0; str && yes[i]; i++) {
        if (!strcmp(str, yes[i])) {
            *out = true;
            return true;
        }
        if (!strcmp(str, no[i])) {
            *out = false;
            return true;
        }
    }
    error_setg(errp, "Parameter '%s' expects 'on' or 'off', got '%s'", name,
               str ? str : "");
    return false;
}
