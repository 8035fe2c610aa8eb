/*
 * Listening sockets passed by a service manager, by name.
 *
 * Theory of operation: listen_fds_init() asks libsystemd for the passed
 * fds and their names (sd_listen_fds_with_names(), which also checks
 * LISTEN_PID, sets FD_CLOEXEC on each fd and clears the variables) and
 * keeps them in a table.  Nothing here listens or accepts: the servers
 * (hw/virtio/vhost-user-server.c, monitor/qmp-server.c) check and
 * duplicate the fd they are given.  A number keeps meaning an fd, so that
 * a parent other than systemd can still pass fd 3 as addr.str=3; a
 * number that is one of the passed fds counts as a use of that socket,
 * and is borrowed like a name.
 *
 * The "used" marks exist for one warning: a socket the unit passes that
 * no export or monitor took is most likely a typo in one of them.
 */
#include "config-host.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <glib.h>
#ifdef CONFIG_LIBSYSTEMD
#include <systemd/sd-daemon.h>
#endif

#include "util/listen-fds.h"

typedef struct ListenFd {
    int fd;
    char *name;
    bool used;
} ListenFd;

static ListenFd *listen_fds;
static unsigned listen_fds_count;

bool listen_fds_init(Error **errp)
{
#ifdef CONFIG_LIBSYSTEMD
    char **names = NULL;
    int n;

    g_assert(!listen_fds);
    n = sd_listen_fds_with_names(1, &names);
    if (n < 0) {
        error_setg_errno(errp, -n, "Cannot take the sockets passed by the "
                         "service manager (LISTEN_FDS, LISTEN_FDNAMES)");
        return false;
    }
    listen_fds = g_new0(ListenFd, n > 0 ? n : 1);
    for (int i = 0; i < n; i++) {
        listen_fds[i].fd = SD_LISTEN_FDS_START + i;
        /* Without LISTEN_FDNAMES systemd calls every one "unknown". */
        listen_fds[i].name = g_strdup(names && names[i] ? names[i]
                                                          : "unknown");
    }
    listen_fds_count = n;
    g_strfreev(names);
#endif
    return true;
}

static bool listen_fds_is_number(const char *str)
{
    if (!*str) {
        return false;
    }
    for (const char *p = str; *p; p++) {
        if (!g_ascii_isdigit(*p)) {
            return false;
        }
    }
    return true;
}

static ListenFd *listen_fds_find(bool by_fd, int fd, const char *name)
{
    for (unsigned i = 0; i < listen_fds_count; i++) {
        ListenFd *l = &listen_fds[i];

        if (by_fd ? l->fd == fd : !strcmp(l->name, name)) {
            return l;
        }
    }
    return NULL;
}

#ifdef CONFIG_LIBSYSTEMD
/* "'a', 'b'", for messages. */
static char *listen_fds_names(void)
{
    GString *s = g_string_new(NULL);

    for (unsigned i = 0; i < listen_fds_count; i++) {
        g_string_append_printf(s, "%s'%s'", i ? ", " : "",
                               listen_fds[i].name);
    }
    return g_string_free(s, FALSE);
}
#endif

int listen_fds_lookup(const char *param, const char *str, bool *borrowed,
                      Error **errp)
{
    ListenFd *l;

    if (listen_fds_is_number(str)) {
        long long v = strtoll(str, NULL, 10);

        if (strlen(str) > 10 || v > G_MAXINT) {
            error_setg(errp, "Parameter '%s': fd %s is out of range", param,
                       str);
            return -1;
        }
        l = listen_fds_find(true, (int)v, NULL);
        if (l) {
            l->used = true;
        }
        *borrowed = l != NULL;
        return (int)v;
    }
#ifndef CONFIG_LIBSYSTEMD
    error_setg(errp, "Parameter '%s': '%s' is not an fd number, and a "
               "socket name needs systemd's LISTEN_FDNAMES: spindle was "
               "built without libsystemd", param, str);
    return -1;
#else
    g_autofree char *names = NULL;

    l = listen_fds_find(false, -1, str);
    if (l) {
        l->used = true;
        *borrowed = true;
        return l->fd;
    }
    if (!listen_fds_count) {
        error_setg(errp, "Parameter '%s': no socket named '%s' was passed: "
                   "the service manager passed no sockets (LISTEN_FDS is "
                   "not set for this process)", param, str);
        return -1;
    }
    names = listen_fds_names();
    error_setg(errp, "Parameter '%s': no socket named '%s' was passed (the "
               "service manager passed %s)", param, str, names);
    return -1;
#endif
}

char *listen_fds_describe_unused(void)
{
    GString *s = g_string_new(NULL);

    for (unsigned i = 0; i < listen_fds_count; i++) {
        if (!listen_fds[i].used) {
            g_string_append_printf(s, "%s%s (fd %d)", s->len ? ", " : "",
                                   listen_fds[i].name, listen_fds[i].fd);
        }
    }
    if (!s->len) {
        g_string_free(s, TRUE);
        return NULL;
    }
    return g_string_free(s, FALSE);
}

void listen_fds_cleanup(void)
{
    for (unsigned i = 0; i < listen_fds_count; i++) {
        close(listen_fds[i].fd);
        g_free(listen_fds[i].name);
    }
    g_clear_pointer(&listen_fds, g_free);
    listen_fds_count = 0;
}
