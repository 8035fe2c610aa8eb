/*
 * EventNotifier: an eventfd used to wake a thread.
 *
 * Any thread may call event_notifier_set(); the owner of the notifier calls
 * event_notifier_test_and_clear() from the thread that watches it.
 */
#ifndef SPINDLE_UTIL_EVENT_NOTIFIER_H
#define SPINDLE_UTIL_EVENT_NOTIFIER_H

#include <stdbool.h>

typedef struct EventNotifier {
    int fd;
} EventNotifier;

/* Create the eventfd (non-blocking, close-on-exec).  Returns 0 or -errno. */
int event_notifier_init(EventNotifier *e, bool active);

/*
 * Wrap an eventfd that somebody else created (e.g. received over a socket).
 * The notifier takes ownership: event_notifier_cleanup() closes it.
 */
void event_notifier_init_fd(EventNotifier *e, int fd);

/* Close the eventfd.  Safe on a notifier whose fd is -1. */
void event_notifier_cleanup(EventNotifier *e);

/* Make the notifier readable.  Returns 0 or -errno.  Any thread. */
int event_notifier_set(EventNotifier *e);

/* Consume a pending signal; true if there was one. */
bool event_notifier_test_and_clear(EventNotifier *e);

static inline int event_notifier_get_fd(const EventNotifier *e)
{
    return e->fd;
}

#endif
