/*
 * Telling a service manager how the daemon is doing (systemd's
 * sd_notify(3) protocol: Type=notify units).
 *
 * Without NOTIFY_SOCKET in the environment, or built without libsystemd,
 * every call does nothing.  Main thread.
 */
#ifndef SPINDLE_DAEMON_NOTIFY_H
#define SPINDLE_DAEMON_NOTIFY_H

/* READY=1 with a STATUS= line counting what listens. */
void daemon_notify_ready(unsigned nexports, unsigned nmonitors);

/* A STATUS= line alone (printf format). */
void daemon_notify_status(const char *fmt, ...) G_GNUC_PRINTF(1, 2);

/* STOPPING=1: shutdown has begun. */
void daemon_notify_stopping(void);

#endif
