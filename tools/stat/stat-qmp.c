/*
 * spindle-stat: a small blocking QMP client (stat-qmp.h).
 *
 * The monitor sends one JSON object per line, or, with pretty=on, one
 * object over several lines.  read_message() therefore gathers whole
 * lines into a pending message and tries to parse it after each one: the
 * first line that completes the object ends it.  Bytes after that line
 * stay in the input buffer for the next message.  A message may not grow
 * past MESSAGE_MAX, so a peer that streams garbage cannot make us
 * allocate without end.
 *
 * Reads wait with poll() for at most q->timeout_s, so a socket whose
 * listener never speaks (not a monitor, or a daemon that hangs) turns
 * into an error instead of a hang.
 */
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <glib.h>
#include <json-glib/json-glib.h>

#include "stat-qmp.h"

#define MESSAGE_MAX (16u << 20)

struct StatQmp {
    int fd;
    GString *in;                /* received, not yet consumed */
    int timeout_s;              /* for each read */
};

void stat_qmp_close(StatQmp *q)
{
    if (!q) {
        return;
    }
    if (q->fd >= 0) {
        close(q->fd);
    }
    g_string_free(q->in, TRUE);
    g_free(q);
}

/* Read more bytes into q->in; false with errp set on EOF, error or
 * timeout. */
static bool read_more(StatQmp *q, Error **errp)
{
    struct pollfd pfd = { .fd = q->fd, .events = POLLIN };
    char buf[65536];
    ssize_t n;
    int r;

    do {
        r = poll(&pfd, 1, q->timeout_s * 1000);
    } while (r < 0 && errno == EINTR);
    if (r == 0) {
        error_setg(errp, "no answer within %d s", q->timeout_s);
        return false;
    }
    do {
        n = read(q->fd, buf, sizeof(buf));
    } while (n < 0 && errno == EINTR);
    if (n < 0) {
        error_setg_errno(errp, errno, "connection lost");
        return false;
    }
    if (n == 0) {
        error_setg(errp, "connection closed");
        return false;
    }
    g_string_append_len(q->in, buf, n);
    return true;
}

/* The next message, a JSON object; NULL with errp set. */
static JsonObject *read_message(StatQmp *q, Error **errp)
{
    g_autoptr(JsonParser) parser = json_parser_new();
    size_t used = 0;            /* bytes of q->in in the pending message */

    for (;;) {
        const char *nl = memchr(q->in->str + used, '\n', q->in->len - used);
        JsonNode *root;

        if (!nl) {
            if (q->in->len > MESSAGE_MAX) {
                goto too_long;
            }
            if (!read_more(q, errp)) {
                return NULL;
            }
            continue;
        }
        used = nl + 1 - q->in->str;
        if (!json_parser_load_from_data(parser, q->in->str, used, NULL)) {
            if (used > MESSAGE_MAX) {
                goto too_long;
            }
            continue;           /* not complete yet (pretty=on) */
        }
        root = json_parser_get_root(parser);
        g_string_erase(q->in, 0, used);
        used = 0;
        if (root && JSON_NODE_HOLDS_OBJECT(root)) {
            return json_object_ref(json_node_get_object(root));
        }
        /* Blank lines and anything else that is not an object: skip. */
    }

too_long:
    error_setg(errp, "a message longer than %u bytes", MESSAGE_MAX);
    return NULL;
}

static bool send_command(StatQmp *q, const char *command, Error **errp)
{
    g_autofree char *line =
        g_strdup_printf("{\"execute\": \"%s\"}\n", command);
    size_t len = strlen(line), done = 0;

    while (done < len) {
        ssize_t n = send(q->fd, line + done, len - done, MSG_NOSIGNAL);

        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            error_setg_errno(errp, errno, "connection lost");
            return false;
        }
        done += n;
    }
    return true;
}

JsonNode *stat_qmp_execute(StatQmp *q, const char *command, Error **errp)
{
    if (!send_command(q, command, errp)) {
        return NULL;
    }
    for (;;) {
        g_autoptr(JsonObject) msg = read_message(q, errp);
        JsonObject *e;

        if (!msg) {
            return NULL;
        }
        if (json_object_has_member(msg, "return")) {
            return json_node_copy(json_object_get_member(msg, "return"));
        }
        e = json_object_has_member(msg, "error") ?
            json_object_get_object_member(msg, "error") : NULL;
        if (e) {
            error_setg(errp, "%s failed: %s", command,
                       json_object_get_string_member_with_default(
                           e, "desc", "(no description)"));
            return NULL;
        }
        /* An event: not ours. */
    }
}

static int connect_unix(const char *path, Error **errp)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    int fd;

    if (strlen(path) >= sizeof(sa.sun_path)) {
        error_setg(errp, "%s: path too long for a UNIX socket", path);
        return -1;
    }
    strcpy(sa.sun_path, path);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        error_setg_errno(errp, errno, "socket");
        return -1;
    }
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        error_setg_errno(errp, errno, "cannot connect to %s", path);
        close(fd);
        return -1;
    }
    return fd;
}

StatQmp *stat_qmp_connect(const char *path, Error **errp)
{
    StatQmp *q = g_new0(StatQmp, 1);
    g_autoptr(JsonObject) greeting = NULL;
    JsonNode *ret;

    q->in = g_string_new(NULL);
    q->timeout_s = STAT_QMP_GREETING_TIMEOUT_S;
    q->fd = connect_unix(path, errp);
    if (q->fd < 0) {
        goto fail;
    }
    greeting = read_message(q, errp);
    if (!greeting || !json_object_has_member(greeting, "QMP")) {
        g_clear_error(errp);
        error_setg(errp, "%s is not a QMP monitor (no QMP greeting)", path);
        goto fail;
    }
    q->timeout_s = STAT_QMP_TIMEOUT_S;
    ret = stat_qmp_execute(q, "qmp_capabilities", errp);
    if (!ret) {
        error_prepend(errp, "%s: ", path);
        goto fail;
    }
    json_node_unref(ret);
    return q;

fail:
    stat_qmp_close(q);
    return NULL;
}
