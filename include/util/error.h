/*
 * Error reporting for the control path.
 *
 * Control-path functions follow the convention
 *     bool do_something(..., Error **errp);
 * They return true on success.  On failure they return false and, if errp is
 * not NULL, store a newly allocated Error in *errp that the caller owns.
 * The message is written for a user: it names the thing that was wrong (an
 * option, a property, a value) and says what would be accepted instead.
 *
 * Error is GLib's GError: all of GLib's helpers (g_error_free, g_clear_error,
 * g_prefix_error) work on it.  Data-path functions never use Error; they
 * return 0 or -errno.
 *
 * Any thread may use these functions on its own Error objects.
 */
#ifndef SPINDLE_UTIL_ERROR_H
#define SPINDLE_UTIL_ERROR_H

#include <glib.h>
#include <stdarg.h>
#include <stdbool.h>

typedef GError Error;

#define SPINDLE_ERROR (spindle_error_quark())
GQuark spindle_error_quark(void);

/* Store a formatted error in *errp (if errp is not NULL).  *errp must be NULL. */
void error_setg(Error **errp, const char *fmt, ...) G_GNUC_PRINTF(2, 3);

/* Like error_setg(), with ": strerror(os_errno)" appended. */
void error_setg_errno(Error **errp, int os_errno, const char *fmt, ...)
    G_GNUC_PRINTF(3, 4);

/* Move local_err into *dst_errp (or free it if dst_errp is NULL). */
void error_propagate(Error **dst_errp, Error *local_err);

/* Put "prefix" in front of the message in *errp, if there is one. */
void error_prepend(Error **errp, const char *fmt, ...) G_GNUC_PRINTF(2, 3);

/* The message of err.  Borrowed: valid until err is freed. */
const char *error_get_pretty(const Error *err);

/* Print "spindle: <message>" on stderr and free err. */
void error_report_err(Error *err);

/* Print "spindle: <formatted message>" on stderr. */
void error_report(const char *fmt, ...) G_GNUC_PRINTF(1, 2);
/* The same with a va_list (for a variadic caller of its own). */
void error_vreport(const char *fmt, va_list ap) G_GNUC_PRINTF(1, 0);

void error_free(Error *err);

#endif
