/*
 * Error reporting for the control path: thin helpers over GError so that
 * every control-path function can take an Error **errp and report one
 * message a user can act on.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include "util/error.h"

G_DEFINE_QUARK(spindle-error-quark, spindle_error)

static void error_setv(Error **errp, const char *suffix, const char *fmt,
                       va_list ap) G_GNUC_PRINTF(3, 0);

static void error_setv(Error **errp, const char *suffix, const char *fmt,
                       va_list ap)
{
    g_autofree char *msg = NULL;

    if (!errp) {
        return;
    }
    g_assert(*errp == NULL);
    msg = g_strdup_vprintf(fmt, ap);
    *errp = g_error_new(SPINDLE_ERROR, 0, "%s%s", msg, suffix ? suffix : "");
}

void error_setg(Error **errp, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    error_setv(errp, NULL, fmt, ap);
    va_end(ap);
}

void error_setg_errno(Error **errp, int os_errno, const char *fmt, ...)
{
    g_autofree char *suffix = g_strdup_printf(": %s", g_strerror(os_errno));
    va_list ap;

    va_start(ap, fmt);
    error_setv(errp, suffix, fmt, ap);
    va_end(ap);
}

void error_propagate(Error **dst_errp, Error *local_err)
{
    if (!local_err) {
        return;
    }
    if (dst_errp && !*dst_errp) {
        *dst_errp = local_err;
    } else {
        g_error_free(local_err);
    }
}

void error_prepend(Error **errp, const char *fmt, ...)
{
    g_autofree char *prefix = NULL;
    char *msg;
    va_list ap;

    if (!errp || !*errp) {
        return;
    }
    va_start(ap, fmt);
    prefix = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    msg = g_strconcat(prefix, (*errp)->message, NULL);
    g_free((*errp)->message);
    (*errp)->message = msg;
}

const char *error_get_pretty(const Error *err)
{
    return err->message;
}

void error_vreport(const char *fmt, va_list ap)
{
    fputs("spindle: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
}

void error_report(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    error_vreport(fmt, ap);
    va_end(ap);
}

void error_report_err(Error *err)
{
    error_report("%s", err->message);
    g_error_free(err);
}

void error_free(Error *err)
{
    if (err) {
        g_error_free(err);
    }
}
