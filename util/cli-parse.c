/*
 * Strict parsing of command-line option values (include/util/cli-parse.h).
 *
 * Theory of operation: every parser first checks the shape of the whole
 * string by hand (a digit first, nothing after the number but an allowed
 * suffix), because strtoull and strtod are lenient in ways a command line
 * must not be: they skip white space, accept a sign on unsigned values,
 * stop quietly at junk and read "inf" and "nan".  Only then is the C
 * library asked for the value, and the range checked.  Each parser has one
 * message, which names the option, says what is accepted and shows what
 * was given.
 */
#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "util/cli-parse.h"

/*
 * The integer at the start of s (decimal, or hexadecimal after 0x): true
 * with *v and *end set, false if s does not start with one or it does not
 * fit 64 bits.
 */
static bool cli_digits(const char *s, uint64_t *v, const char **end)
{
    guint base = 10;
    char *e;

    if (!g_ascii_isdigit(s[0])) {
        return false;
    }
    if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
        if (!g_ascii_isxdigit(s[2])) {
            return false;
        }
        base = 16;
    }
    errno = 0;
    *v = g_ascii_strtoull(s, &e, base);
    *end = e;
    return errno == 0 && e != s;
}

bool cli_parse_uint(const char *name, const char *str, uint64_t min,
                    uint64_t max, uint64_t *out, Error **errp)
{
    const char *end;
    uint64_t v;

    if (!str || !cli_digits(str, &v, &end) || *end || v < min || v > max) {
        error_setg(errp, "%s: expected an integer from %" PRIu64 " to %"
                   PRIu64 ", got '%s'", name, min, max, str ? str : "");
        return false;
    }
    *out = v;
    return true;
}

/* The multiplier of a size suffix letter, or 0 if c is not one. */
static uint64_t cli_size_suffix(char c)
{
    switch (g_ascii_tolower(c)) {
    case 'k':
        return 1ull << 10;
    case 'm':
        return 1ull << 20;
    case 'g':
        return 1ull << 30;
    case 't':
        return 1ull << 40;
    default:
        return 0;
    }
}

bool cli_parse_size(const char *name, const char *str, uint64_t *out,
                    Error **errp)
{
    const char *end;
    uint64_t v, mult = 1;

    if (!str || !cli_digits(str, &v, &end)) {
        goto bad;
    }
    if (*end) {
        mult = cli_size_suffix(*end++);
        if (!mult) {
            goto bad;
        }
        if (*end == 'i') {
            end++;
        }
        if (*end == 'B') {
            end++;
        }
    }
    if (*end || __builtin_mul_overflow(v, mult, &v)) {
        goto bad;
    }
    *out = v;
    return true;
bad:
    error_setg(errp, "%s: expected a byte count such as 4096, 64k or 1G, "
               "got '%s'", name, str ? str : "");
    return false;
}

/*
 * A plain decimal number in [0, max]: digits and a point first, so no
 * sign, white space, "inf", "nan" or hexadecimal float.  The message calls
 * the value what ("a number", "seconds").
 */
static bool cli_parse_decimal(const char *name, const char *str,
                              const char *what, double max, double *out,
                              Error **errp)
{
    char *end = NULL;
    double v = 0;

    if (str && (g_ascii_isdigit(str[0]) || str[0] == '.') &&
        !strpbrk(str, "xX")) {
        v = g_ascii_strtod(str, &end);
    }
    if (!end || end == str || *end || !(v >= 0) || v > max) {
        error_setg(errp, "%s: expected %s from 0 to %g, got '%s'", name,
                   what, max, str ? str : "");
        return false;
    }
    *out = v;
    return true;
}

bool cli_parse_number(const char *name, const char *str, double max,
                      double *out, Error **errp)
{
    return cli_parse_decimal(name, str, "a number", max, out, errp);
}

bool cli_parse_seconds(const char *name, const char *str, double max,
                       double *out, Error **errp)
{
    return cli_parse_decimal(name, str, "seconds", max, out, errp);
}

bool cli_parse_bool(const char *name, const char *str, bool *out,
                    Error **errp)
{
    /* Even indexes mean on, odd ones off. */
    static const char *const words[] = {
        "on", "off", "yes", "no", "true", "false",
    };

    for (size_t i = 0; str && i < G_N_ELEMENTS(words); i++) {
        if (!strcmp(str, words[i])) {
            *out = i % 2 == 0;
            return true;
        }
    }
    error_setg(errp, "%s: expected on or off, got '%s'", name,
               str ? str : "");
    return false;
}

bool cli_parse_choice(const char *name, const char *str,
                      const char *const *choices, size_t n, int *out,
                      Error **errp)
{
    g_autoptr(GString) list = g_string_new(NULL);
    size_t i, left = 0;

    for (i = 0; str && i < n; i++) {
        if (choices[i] && !strcmp(str, choices[i])) {
            *out = i;
            return true;
        }
    }
    for (i = 0; i < n; i++) {
        left += choices[i] != NULL;
    }
    /* "a, b or c": a comma between all but the last two. */
    for (i = 0; i < n; i++) {
        if (!choices[i]) {
            continue;
        }
        left--;
        g_string_append(list, choices[i]);
        g_string_append(list, left > 1 ? ", " : left == 1 ? " or " : "");
    }
    error_setg(errp, "%s: expected %s, got '%s'", name, list->str,
               str ? str : "");
    return false;
}

bool cli_parse_argv(GOptionContext *ctx, int argc, char **argv,
                    Error **errp)
{
    if (!g_option_context_parse(ctx, &argc, &argv, errp)) {
        return false;
    }
    if (argc > 1) {
        error_setg(errp, "unexpected argument '%s'", argv[1]);
        return false;
    }
    return true;
}
