/*
 * EventNotifier: an eventfd in non-blocking mode.  Setting it adds one to
 * the counter; test_and_clear reads (and so zeroes) the counter.
 */
#include <errno.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include "util/event-notifier.h"

int event_notifier_init(EventNotifier *e, bool active)
{
    int fd = eventfd(active ? 1 : 0, EFD_NONBLOCK | EFD_CLOEXEC);

    if (fd < 0) {
        e->fd = -1;
        return -errno;
    }
    e->fd = fd;
    return 0;
}

void event_notifier_init_fd(EventNotifier *e, int fd)
{
    e->fd = fd;
}

void event_notifier_cleanup(EventNotifier *e)
{
    if (e->fd >= 0) {
        close(e->fd);
        e->fd = -1;
    }
}

int event_notifier_set(EventNotifier *e)
{
    uint64_t one = 1;
    ssize_t r;

    do {
        r = write(e->fd, &one, sizeof(one));
    } while (r < 0 && errno == EINTR);
    /* EAGAIN means the counter is saturated: it is readable, which is all we want. */
    if (r < 0 && errno != EAGAIN) {
        return -errno;
    }
    return 0;
}

bool event_notifier_test_and_clear(EventNotifier *e)
{
    uint64_t value;
    ssize_t r;

    do {
        r = read(e->fd, &value, sizeof(value));
    } while (r < 0 && errno == EINTR);
    return r == sizeof(value) && value > 0;
}
