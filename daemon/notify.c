/*
 * sd_notify(3) for the daemon: READY=1 once every export and monitor
 * listens, STOPPING=1 when shutdown begins, STATUS= lines for
 * `systemctl status`.
 *
 * libsystemd sends each message as one datagram to NOTIFY_SOCKET and
 * does nothing when that variable is unset; its errors are not ours to
 * report (a service manager that went away must not stop the daemon), so
 * they are ignored.
 */
#include "config-host.h"

#include <stdarg.h>
#include <glib.h>
#ifdef CONFIG_LIBSYSTEMD
#include <systemd/sd-daemon.h>
#endif

#include "daemon/notify.h"

static void daemon_notify_send(const char *msg)
{
#ifdef CONFIG_LIBSYSTEMD
    sd_notify(0, msg);
#endif
}

void daemon_notify_ready(unsigned nexports, unsigned nmonitors)
{
    g_autofree char *msg =
        g_strdup_printf("READY=1\nSTATUS=serving %u export%s, %u QMP "
                        "monitor%s", nexports, nexports == 1 ? "" : "s",
                        nmonitors, nmonitors == 1 ? "" : "s");

    daemon_notify_send(msg);
}

void daemon_notify_status(const char *fmt, ...)
{
    g_autofree char *status = NULL;
    g_autofree char *msg = NULL;
    va_list ap;

    va_start(ap, fmt);
    status = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    msg = g_strconcat("STATUS=", status, NULL);
    daemon_notify_send(msg);
}

void daemon_notify_stopping(void)
{
    daemon_notify_send("STOPPING=1\nSTATUS=stopping");
}
