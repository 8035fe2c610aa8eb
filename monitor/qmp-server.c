/*
 * The QMP server: UNIX sockets, clients, framing, replies and events.
 *
 * Theory of operation
 * -------------------
 * A QmpServer listens on one UNIX stream socket (a path it creates with
 * mode 0600, replacing a stale socket file, or an inherited listening fd:
 * util/unix-socket.c) and accepts any number of clients.  Everything runs
 * in the main loop's AioContext: the listening socket and every client
 * socket are non-blocking and have fd handlers there.
 *
 * Input.  A client sends a byte stream of JSON values with no separator
 * required (qemu.qmp sends "{...}" without a newline).  A small scanner
 * (QmpScanner) cuts the stream into messages: it counts the depth of
 * braces and brackets outside strings, knowing string quotes and
 * backslash escapes, and a message ends when the depth is back to 0.  It
 * does framing only; each complete message is then parsed by json-glib.
 * Whitespace between messages is skipped.  A stray '}' or ']' at the top
 * level is a (bad) message of its own; anything else there (foo, 42) is a
 * run that ends at whitespace, at the start of the next message ('{', '[',
 * '"') or at a stray bracket, and is one message too (json-glib says what
 * is wrong with it: not JSON, or not an object).  A
 * message longer than QMP_MAX_MESSAGE bytes or nested deeper than
 * QMP_MAX_NESTING gets one error reply as soon as the limit is crossed;
 * the rest of it is counted but not stored, until its depth is back to 0.
 * So memory per client is bounded and the scanner only ever moves
 * forward; the connection stays open through all of these.
 *
 * Commands.  A client must negotiate first (qmp_capabilities); the server
 * checks the message's members with QEMU's messages, runs the command
 * through qmp_dispatch() and replies with "return" or "error", echoing
 * "id".  Commands run synchronously in the read handler and may run
 * nested event loops.  While one runs (qmp_dispatching > 0), no client's
 * input is read: a read handler that fires meanwhile takes its fd out of
 * the loop (suspended) and the outermost command's end puts them all back,
 * so commands never nest and each client's messages run in order.  A
 * client may disconnect or be dropped while its command runs: it is
 * reference-counted, and "closed" (fd -1, server NULL) is a state, not a
 * free.
 *
 * Output.  Replies and events are queued per client and written without
 * blocking; what the socket does not take waits for a write handler.  A
 * client that lets more than QMP_MAX_BACKLOG bytes pile up (one that never
 * reads) is disconnected with a log line.  A client that half-closes gets
 * its pending replies before the socket is closed.  qmp_server_free()
 * writes what is still pending, blocking for at most QMP_FLUSH_TIMEOUT_MS,
 * so that the reply to "quit" and the SHUTDOWN event reach the client.
 *
 * Events go to every negotiated client of every live server (the static
 * list qmp_servers).
 *
 * Threads: main thread only.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <stdarg.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include <glib.h>

#include "util/main-thread.h"
#include "qmp-int.h"
#include "util/clock.h"
#include "util/unix-socket.h"

#define QMP_READ_CHUNK         (64 * 1024)
#define QMP_MAX_BACKLOG        (16u << 20)    /* unsent output per client */
#define QMP_FLUSH_TIMEOUT_MS   1000           /* at qmp_server_free() */
#define QMP_ACCEPT_RETRY_NS    (100 * 1000 * 1000)
#define QMP_SCAN_KEEP_BUF      (64 * 1024)    /* keep smaller buffers */

/* ------------------------------------------------------------------------ */
/* Framing                                                                   */

typedef enum QmpScanEvent {
    QMP_SCAN_NONE,              /* nothing to do yet */
    QMP_SCAN_MESSAGE,           /* buf holds one complete message */
    QMP_SCAN_TOO_LARGE,         /* a message went over QMP_MAX_MESSAGE */
    QMP_SCAN_TOO_DEEP,          /* ... over QMP_MAX_NESTING */
} QmpScanEvent;

typedef struct QmpScanner {
    GString *buf;               /* the message so far (not while discarding) */
    size_t depth;               /* open braces and brackets */
    bool in_msg;                /* a '{', '[' or '"' started a message */
    bool garbage;               /* a run of anything else at the top level */
    bool in_string;
    bool escape;                /* the previous byte was a backslash */
    bool discarding;            /* over a limit: count, do not store */
} QmpScanner;

static bool qmp_scan_is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

static bool qmp_scan_starts_message(char c)
{
    return c == '{' || c == '[' || c == '"';
}

/* A closing bracket at the top level can only be a message of its own. */
static bool qmp_scan_is_closing(char c)
{
    return c == '}' || c == ']';
}

static QmpScanEvent qmp_scan_append(QmpScanner *sc, char c)
{
    if (sc->discarding) {
        return QMP_SCAN_NONE;
    }
    if (sc->buf->len >= QMP_MAX_MESSAGE) {
        sc->discarding = true;
        g_string_truncate(sc->buf, 0);
        return QMP_SCAN_TOO_LARGE;
    }
    g_string_append_c(sc->buf, c);
    return QMP_SCAN_NONE;
}

/* The current message ended; ev is what its last byte caused. */
static QmpScanEvent qmp_scan_end(QmpScanner *sc, QmpScanEvent ev)
{
    bool was_discarding = sc->discarding;

    sc->in_msg = false;
    sc->garbage = false;
    sc->in_string = false;
    sc->escape = false;
    sc->depth = 0;
    sc->discarding = false;
    if (ev != QMP_SCAN_NONE) {
        return ev;
    }
    return was_discarding ? QMP_SCAN_NONE : QMP_SCAN_MESSAGE;
}

/*
 * Feed one byte.  *consumed is false if the byte ended a garbage run and
 * must be fed again once the event is handled (it starts the next
 * message).  After QMP_SCAN_MESSAGE the caller takes sc->buf's contents
 * and calls qmp_scan_reset_buf().
 */
static QmpScanEvent qmp_scan_byte(QmpScanner *sc, char c, bool *consumed)
{
    QmpScanEvent ev;

    *consumed = true;
    if (sc->garbage) {
        if (qmp_scan_is_space(c) || qmp_scan_starts_message(c) ||
            qmp_scan_is_closing(c)) {
            *consumed = qmp_scan_is_space(c);
            return qmp_scan_end(sc, QMP_SCAN_NONE);
        }
        return qmp_scan_append(sc, c);
    }
    if (!sc->in_msg) {
        if (qmp_scan_is_space(c)) {
            return QMP_SCAN_NONE;
        }
        if (c == '{' || c == '[') {
            sc->in_msg = true;
            sc->depth = 1;
        } else if (c == '"') {
            sc->in_msg = true;
            sc->in_string = true;
        } else if (qmp_scan_is_closing(c)) {
            qmp_scan_append(sc, c);
            return qmp_scan_end(sc, QMP_SCAN_NONE);
        } else {
            sc->garbage = true;
        }
        return qmp_scan_append(sc, c);
    }
    ev = qmp_scan_append(sc, c);
    if (sc->in_string) {
        if (sc->escape) {
            sc->escape = false;
        } else if (c == '\\') {
            sc->escape = true;
        } else if (c == '"') {
            sc->in_string = false;
            if (sc->depth == 0) {
                return qmp_scan_end(sc, ev);    /* a top-level string */
            }
        }
        return ev;
    }
    switch (c) {
    case '"':
        sc->in_string = true;
        break;
    case '{':
    case '[':
        sc->depth++;
        if (sc->depth > QMP_MAX_NESTING && !sc->discarding) {
            sc->discarding = true;
            g_string_truncate(sc->buf, 0);
            return QMP_SCAN_TOO_DEEP;
        }
        break;
    case '}':
    case ']':
        if (--sc->depth == 0) {
            return qmp_scan_end(sc, ev);
        }
        break;
    }
    return ev;
}

/* Forget the message just handled; do not keep a huge buffer around. */
static void qmp_scan_reset_buf(QmpScanner *sc)
{
    if (sc->buf->allocated_len > QMP_SCAN_KEEP_BUF) {
        g_string_free(sc->buf, TRUE);
        sc->buf = g_string_new(NULL);
    } else {
        g_string_truncate(sc->buf, 0);
    }
}

/* ------------------------------------------------------------------------ */
/* State                                                                     */

typedef struct QmpClient {
    QmpServer *server;          /* NULL once closed */
    int fd;                     /* -1 once closed */
    unsigned refcnt;            /* the server's list, running code */
    uint64_t num;               /* 1, 2, ... per server: for log lines */
    bool negotiated;
    bool suspended;             /* not read while a command runs */
    bool eof;                   /* the client closed its end */
    bool reg_read, reg_write;   /* what the fd handler has now */
    QmpScanner scan;
    GByteArray *out;            /* unsent output from out_off on */
    size_t out_off;
} QmpClient;

struct QmpServer {
    AioContext *ctx;
    char *name;                 /* for log lines */
    char *path;                 /* the socket we created, or NULL */
    dev_t path_dev;             /* its identity, to unlink only our file */
    ino_t path_ino;
    int listen_fd;
    bool accepting;
    AioTimer accept_retry;      /* out of fds: try accept() again later */
    bool pretty;
    GPtrArray *clients;         /* QmpClient *, one reference each */
    uint64_t accepted;
};

static GList *qmp_servers;          /* every live QmpServer */
static unsigned qmp_dispatching;    /* commands running right now */

static void G_GNUC_PRINTF(2, 3) qmp_log(QmpServer *s, const char *fmt, ...)
{
    g_autofree char *msg = NULL;
    va_list ap;

    va_start(ap, fmt);
    msg = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    error_report("QMP monitor '%s': %s", s->name, msg);
}

/* ------------------------------------------------------------------------ */
/* Clients: lifetime                                                         */

static void qmp_client_read(void *opaque);
static void qmp_client_write(void *opaque);

static void qmp_client_ref(QmpClient *c)
{
    c->refcnt++;
}

static void qmp_client_unref(QmpClient *c)
{
    g_assert(c->refcnt > 0);
    if (--c->refcnt > 0) {
        return;
    }
    g_assert(c->fd < 0);
    g_string_free(c->scan.buf, TRUE);
    g_byte_array_unref(c->out);
    g_free(c);
}

static bool qmp_client_has_output(const QmpClient *c)
{
    return c->out_off < c->out->len;
}

/* Register what the client needs now: reading unless suspended or at
 * EOF, writing while output is pending. */
static void qmp_client_update_handlers(QmpClient *c)
{
    bool want_read = !c->suspended && !c->eof;
    bool want_write = qmp_client_has_output(c);

    if (c->fd < 0 ||
        (want_read == c->reg_read && want_write == c->reg_write)) {
        return;
    }
    aio_set_fd_handler(c->server->ctx, c->fd,
                       want_read ? qmp_client_read : NULL,
                       want_write ? qmp_client_write : NULL, NULL, NULL, c);
    if (want_read || want_write) {
        aio_set_fd_handler_name(c->server->ctx, c->fd, "qmp-client");
    }
    c->reg_read = want_read;
    c->reg_write = want_write;
}

/* Drop the connection (unsent output is lost).  The memory stays while
 * someone holds a reference. */
static void qmp_client_close(QmpClient *c)
{
    QmpServer *s = c->server;

    if (c->fd < 0) {
        return;
    }
    if (c->reg_read || c->reg_write) {
        aio_set_fd_handler(s->ctx, c->fd, NULL, NULL, NULL, NULL, NULL);
    }
    c->reg_read = c->reg_write = false;
    close(c->fd);
    c->fd = -1;
    c->server = NULL;
    g_ptr_array_remove(s->clients, c);
    qmp_client_unref(c);                    /* the list's reference */
}

/* ------------------------------------------------------------------------ */
/* Clients: output                                                           */

/* Write what the socket takes now.  False if the client is gone. */
static bool qmp_client_flush(QmpClient *c)
{
    while (qmp_client_has_output(c)) {
        ssize_t n = send(c->fd, c->out->data + c->out_off,
                         c->out->len - c->out_off,
                         MSG_NOSIGNAL | MSG_DONTWAIT);

        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                break;
            }
            qmp_client_close(c);            /* it went away */
            return false;
        }
        c->out_off += (size_t)n;
    }
    if (!qmp_client_has_output(c)) {
        g_byte_array_set_size(c->out, 0);
        c->out_off = 0;
    } else if (c->out_off > c->out->len / 2) {
        g_byte_array_remove_range(c->out, 0, c->out_off);
        c->out_off = 0;
    }
    return true;
}

static void qmp_client_write(void *opaque)
{
    QmpClient *c = opaque;

    g_assert(aio_context_in_home_thread(c->server->ctx));
    if (!qmp_client_flush(c)) {
        return;
    }
    if (c->eof && !qmp_client_has_output(c)) {
        qmp_client_close(c);
        return;
    }
    qmp_client_update_handlers(c);
}

static void qmp_client_send_text(QmpClient *c, const char *text, size_t len)
{
    QmpServer *s = c->server;

    if (c->fd < 0) {
        return;
    }
    g_byte_array_append(c->out, (const guint8 *)text, len);
    if (!qmp_client_flush(c)) {
        return;
    }
    if (c->out->len - c->out_off > QMP_MAX_BACKLOG) {
        qmp_log(s, "client %" G_GUINT64_FORMAT " does not read its replies "
                "(over %u MiB unsent): disconnecting it", c->num,
                QMP_MAX_BACKLOG >> 20);
        qmp_client_close(c);
        return;
    }
    qmp_client_update_handlers(c);
}

/*
 * json-glib's pretty generator writes an empty object or array as "{    }"
 * (the indent with nothing after it).  Collapse a bracket pair holding
 * only whitespace outside strings to "{}" / "[]", in place; returns the
 * new length.
 */
static gsize qmp_pretty_collapse_empty(char *text, gsize len)
{
    bool in_string = false, escape = false;
    gsize out = 0;

    for (gsize i = 0; i < len; i++) {
        char c = text[i];

        text[out++] = c;
        if (in_string) {
            if (escape) {
                escape = false;
            } else if (c == '\\') {
                escape = true;
            } else if (c == '"') {
                in_string = false;
            }
            continue;
        }
        if (c == '"') {
            in_string = true;
        } else if (c == '{' || c == '[') {
            char close = c == '{' ? '}' : ']';
            gsize j = i + 1;

            while (j < len && qmp_scan_is_space(text[j])) {
                j++;
            }
            if (j < len && text[j] == close) {
                text[out++] = close;
                i = j;
            }
        }
    }
    text[out] = '\0';
    return out;
}

/* Send node (borrowed) as one reply line, or indented for pretty=on. */
static void qmp_client_send(QmpClient *c, JsonNode *node)
{
    g_autoptr(JsonGenerator) gen = NULL;
    g_autofree char *text = NULL;
    gsize len;

    if (c->fd < 0) {
        return;
    }
    gen = json_generator_new();
    if (c->server->pretty) {
        json_generator_set_pretty(gen, TRUE);
        json_generator_set_indent(gen, 4);
    }
    json_generator_set_root(gen, node);
    text = json_generator_to_data(gen, &len);
    if (c->server->pretty) {
        len = qmp_pretty_collapse_empty(text, len);
    }
    text = g_realloc(text, len + 2);
    text[len++] = '\n';
    text[len] = '\0';
    qmp_client_send_text(c, text, len);
}

static void qmp_client_send_object(QmpClient *c, JsonObject *o)
{
    JsonNode *node = json_node_new(JSON_NODE_OBJECT);

    json_node_take_object(node, o);
    qmp_client_send(c, node);
    json_node_unref(node);
}

/* {"error": {"class": CLASS, "desc": DESC}, "id": ID} */
static void qmp_client_send_error(QmpClient *c, JsonNode *id,
                                  const char *cls, const char *desc)
{
    JsonObject *o = json_object_new();
    JsonObject *e = json_object_new();

    json_object_set_string_member(e, "class", cls);
    json_object_set_string_member(e, "desc", desc);
    json_object_set_object_member(o, "error", e);
    if (id) {
        json_object_set_member(o, "id", json_node_copy(id));
    }
    qmp_client_send_object(c, o);
}

static void qmp_client_send_err(QmpClient *c, JsonNode *id, Error *err)
{
    qmp_client_send_error(c, id, qmp_error_class_name(err),
                          error_get_pretty(err));
}

static void G_GNUC_PRINTF(3, 4)
qmp_client_send_generic(QmpClient *c, JsonNode *id, const char *fmt, ...)
{
    g_autofree char *desc = NULL;
    va_list ap;

    va_start(ap, fmt);
    desc = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    qmp_client_send_error(c, id, "GenericError", desc);
}

static void qmp_client_send_greeting(QmpClient *c)
{
    JsonObject *o = json_object_new();
    JsonObject *qmp = json_object_new();

    json_object_set_member(qmp, "version", qmp_version_info());
    json_object_set_array_member(qmp, "capabilities", json_array_new());
    json_object_set_object_member(o, "QMP", qmp);
    qmp_client_send_object(c, o);
}

/* ------------------------------------------------------------------------ */
/* Clients: input                                                            */

/* Put every client suspended while a command ran back in the loop. */
static void qmp_resume_clients(void)
{
    for (GList *l = qmp_servers; l; l = l->next) {
        QmpServer *s = l->data;

        for (guint i = 0; i < s->clients->len; i++) {
            QmpClient *c = g_ptr_array_index(s->clients, i);

            if (c->suspended) {
                c->suspended = false;
                qmp_client_update_handlers(c);
            }
        }
    }
}

/* json-glib reads 1e400 as infinity, which it would write back as
 * "inf.0" (not JSON) if we echoed it. */
static bool qmp_json_is_finite(JsonNode *node)
{
    if (JSON_NODE_HOLDS_VALUE(node)) {
        return json_node_get_value_type(node) != G_TYPE_DOUBLE ||
               isfinite(json_node_get_double(node));
    }
    if (JSON_NODE_HOLDS_OBJECT(node)) {
        JsonObjectIter iter;
        const char *name;
        JsonNode *member;

        json_object_iter_init(&iter, json_node_get_object(node));
        while (json_object_iter_next(&iter, &name, &member)) {
            if (!qmp_json_is_finite(member)) {
                return false;
            }
        }
    } else if (JSON_NODE_HOLDS_ARRAY(node)) {
        JsonArray *a = json_node_get_array(node);

        for (guint i = 0; i < json_array_get_length(a); i++) {
            if (!qmp_json_is_finite(json_array_get_element(a, i))) {
                return false;
            }
        }
    }
    return true;
}

/*
 * QEMU's checks of a request's members, in the order they come: execute
 * must be a string, arguments an object, id anything, nothing else.
 */
static bool qmp_check_request(JsonObject *req, Error **errp)
{
    JsonObjectIter iter;
    const char *name;
    JsonNode *member;

    json_object_iter_init_ordered(&iter, req);
    while (json_object_iter_next_ordered(&iter, &name, &member)) {
        if (!strcmp(name, "execute")) {
            if (!JSON_NODE_HOLDS_VALUE(member) ||
                json_node_get_value_type(member) != G_TYPE_STRING) {
                error_setg(errp, "QMP input member 'execute' must be a "
                           "string");
                return false;
            }
        } else if (!strcmp(name, "arguments")) {
            if (!JSON_NODE_HOLDS_OBJECT(member)) {
                error_setg(errp, "QMP input member 'arguments' must be an "
                           "object");
                return false;
            }
        } else if (strcmp(name, "id")) {
            error_setg(errp, "QMP input member '%s' is unexpected", name);
            return false;
        }
    }
    if (!json_object_has_member(req, "execute")) {
        error_setg(errp, "QMP input lacks member 'execute'");
        return false;
    }
    return true;
}

/* Run the request's command as c may (negotiation) and reply. */
static void qmp_client_execute(QmpClient *c, JsonObject *req, JsonNode *id)
{
    const char *name = json_object_get_string_member(req, "execute");
    JsonObject *args = json_object_has_member(req, "arguments") ?
                       json_object_get_object_member(req, "arguments") : NULL;
    bool negotiating = !strcmp(name, "qmp_capabilities");
    Error *err = NULL;
    JsonNode *ret;
    JsonObject *reply;

    if (negotiating && c->negotiated) {
        qmp_client_send_error(c, id, "CommandNotFound",
                              "Capabilities negotiation is already "
                              "complete, command ignored");
        return;
    }
    if (!negotiating && !c->negotiated) {
        qmp_client_send_error(c, id, "CommandNotFound",
                              "Expecting capabilities negotiation with "
                              "'qmp_capabilities'");
        return;
    }

    qmp_client_ref(c);
    qmp_dispatching++;
    ret = qmp_dispatch(name, args, &err);
    qmp_dispatching--;
    if (ret && negotiating) {
        c->negotiated = true;
    }
    if (err) {
        qmp_client_send_err(c, id, err);
        error_free(err);
    } else {
        reply = json_object_new();
        json_object_set_member(reply, "return", ret);
        if (id) {
            json_object_set_member(reply, "id", json_node_copy(id));
        }
        qmp_client_send_object(c, reply);
    }
    if (qmp_dispatching == 0) {
        qmp_resume_clients();
    }
    qmp_client_unref(c);
}

/* One complete message from the scanner. */
static void qmp_client_handle(QmpClient *c, const char *text, size_t len)
{
    g_autoptr(JsonParser) parser = json_parser_new();
    GError *perr = NULL;
    Error *err = NULL;
    JsonNode *root, *id;
    JsonObject *req;

    if (!json_parser_load_from_data(parser, text, (gssize)len, &perr)) {
        /* json-glib names the input "<data>"; say where instead. */
        const char *msg = perr->message;
        const char *where = "";

        if (g_str_has_prefix(msg, "<data>:")) {
            msg += strlen("<data>:");
            where = "at ";
        }
        qmp_client_send_generic(c, NULL, "JSON parse error, %s%s", where,
                                msg);
        g_error_free(perr);
        return;
    }
    root = json_parser_get_root(parser);
    if (!root) {
        qmp_client_send_generic(c, NULL, "JSON parse error, no value");
        return;
    }
    if (!qmp_json_is_finite(root)) {
        qmp_client_send_generic(c, NULL, "JSON parse error, number out of "
                                "range");
        return;
    }
    if (!JSON_NODE_HOLDS_OBJECT(root)) {
        qmp_client_send_generic(c, NULL, "QMP input must be a JSON object");
        return;
    }
    req = json_node_get_object(root);
    id = json_object_get_member(req, "id");
    if (!qmp_check_request(req, &err)) {
        qmp_client_send_err(c, id, err);
        error_free(err);
        return;
    }
    qmp_client_execute(c, req, id);
}

static void qmp_client_feed(QmpClient *c, const char *data, size_t len)
{
    size_t i = 0;

    while (i < len && c->fd >= 0) {
        bool consumed;
        QmpScanEvent ev = qmp_scan_byte(&c->scan, data[i], &consumed);

        if (consumed) {
            i++;
        }
        switch (ev) {
        case QMP_SCAN_NONE:
            continue;
        case QMP_SCAN_MESSAGE:
            qmp_client_handle(c, c->scan.buf->str, c->scan.buf->len);
            break;
        case QMP_SCAN_TOO_LARGE:
            qmp_client_send_generic(c, NULL, "JSON parse error, message too "
                                    "large (more than %u bytes)",
                                    QMP_MAX_MESSAGE);
            break;
        case QMP_SCAN_TOO_DEEP:
            qmp_client_send_generic(c, NULL, "JSON parse error, nesting too "
                                    "deep (more than %u levels)",
                                    QMP_MAX_NESTING);
            break;
        }
        /* A message ended (or was dropped): the next starts afresh. */
        qmp_scan_reset_buf(&c->scan);
    }
}

static void qmp_client_read(void *opaque)
{
    QmpClient *c = opaque;
    char buf[QMP_READ_CHUNK];
    ssize_t n;

    g_assert(aio_context_in_home_thread(c->server->ctx));
    if (qmp_dispatching) {
        /* A command is running (we are in its nested loop): later. */
        c->suspended = true;
        qmp_client_update_handlers(c);
        return;
    }
    n = recv(c->fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            qmp_client_close(c);
        }
        return;
    }
    if (n == 0) {
        /* The client is done sending; it may still read what we owe. */
        c->eof = true;
        if (!qmp_client_has_output(c)) {
            qmp_client_close(c);
        } else {
            qmp_client_update_handlers(c);
        }
        return;
    }
    qmp_client_ref(c);
    qmp_client_feed(c, buf, (size_t)n);
    qmp_client_unref(c);
}

/* ------------------------------------------------------------------------ */
/* Accepting                                                                 */

static void qmp_accept(void *opaque);

static void qmp_set_accepting(QmpServer *s, bool on)
{
    if (s->accepting != on) {
        aio_set_fd_handler(s->ctx, s->listen_fd, on ? qmp_accept : NULL,
                           NULL, NULL, NULL, s);
        if (on) {
            aio_set_fd_handler_name(s->ctx, s->listen_fd, "qmp-listen");
        }
        s->accepting = on;
    }
}

static void qmp_accept_retry(void *opaque)
{
    qmp_set_accepting(opaque, true);
}

static void qmp_accept(void *opaque)
{
    QmpServer *s = opaque;
    QmpClient *c;
    int fd;

    g_assert(aio_context_in_home_thread(s->ctx));
    fd = accept4(s->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
            errno == ENOMEM) {
            /* The connection stays queued: do not spin on it. */
            qmp_log(s, "cannot accept a connection: %s (trying again "
                    "shortly)", g_strerror(errno));
            qmp_set_accepting(s, false);
            aio_timer_mod(&s->accept_retry,
                          clock_now_ns() + QMP_ACCEPT_RETRY_NS);
        } else if (errno != EAGAIN && errno != EWOULDBLOCK &&
                   errno != EINTR && errno != ECONNABORTED) {
            qmp_log(s, "cannot accept a connection: %s", g_strerror(errno));
        }
        return;
    }
    c = g_new0(QmpClient, 1);
    c->server = s;
    c->fd = fd;
    c->refcnt = 1;                          /* the list's */
    c->num = ++s->accepted;
    c->scan.buf = g_string_new(NULL);
    c->out = g_byte_array_new();
    /* Commands are running (nested loop): read this one afterwards. */
    c->suspended = qmp_dispatching > 0;
    g_ptr_array_add(s->clients, c);
    qmp_client_update_handlers(c);
    qmp_client_send_greeting(c);
}

/* ------------------------------------------------------------------------ */
/* Listening sockets                                                         */

static int qmp_listen_path(QmpServer *s, const char *path, Error **errp)
{
    struct stat st;
    int fd;

    fd = unix_socket_listen_path(path, "QMP", &st, errp);
    if (fd < 0) {
        return -1;
    }
    s->path = g_strdup(path);
    s->path_dev = st.st_dev;
    s->path_ino = st.st_ino;
    return fd;
}

/* Take an inherited listening socket (on success only). */
static int qmp_adopt_listen_fd(int fd, Error **errp)
{
    if (fd < 0 || fcntl(fd, F_GETFD) < 0) {
        error_setg(errp, "File descriptor %d is not open (the parent must "
                   "pass it to spindle)", fd);
        return -1;
    }
    return unix_socket_adopt_listen_fd(fd, false, errp);
}

/* ------------------------------------------------------------------------ */
/* Servers                                                                   */

QmpServer *qmp_server_new(const QmpServerConfig *cfg, AioContext *ctx,
                          Error **errp)
{
    QmpServer *s;
    int fd;

    g_assert(aio_context_in_home_thread(ctx));
    /* qmp_capabilities must exist for a client to get anywhere. */
    qmp_register_core_commands();
    s = g_new0(QmpServer, 1);
    s->ctx = ctx;
    s->pretty = cfg->pretty;
    s->name = g_strdup(cfg->name ? cfg->name :
                       cfg->path ? cfg->path : "qmp");
    fd = cfg->path ? qmp_listen_path(s, cfg->path, errp)
                   : qmp_adopt_listen_fd(cfg->listen_fd, errp);
    if (fd < 0) {
        g_free(s->name);
        g_free(s);
        return NULL;
    }
    s->listen_fd = fd;
    s->clients = g_ptr_array_new();
    aio_timer_init(ctx, &s->accept_retry, qmp_accept_retry, s);
    qmp_set_accepting(s, true);
    qmp_servers = g_list_append(qmp_servers, s);
    return s;
}

/* Write c's pending output, waiting until deadline_ns at most. */
static void qmp_client_flush_blocking(QmpClient *c, int64_t deadline_ns)
{
    while (c->fd >= 0 && qmp_client_has_output(c)) {
        int64_t left_ms = (deadline_ns - clock_now_ns()) / 1000000;
        struct pollfd pfd = { .fd = c->fd, .events = POLLOUT };

        if (left_ms <= 0 || poll(&pfd, 1, (int)left_ms) <= 0 ||
            !qmp_client_flush(c)) {
            return;
        }
    }
}

void qmp_server_free(QmpServer *s)
{
    int64_t deadline;

    assert_main_thread();
    if (!s) {
        return;
    }
    g_assert(aio_context_in_home_thread(s->ctx));
    qmp_servers = g_list_remove(qmp_servers, s);
    /* Best effort: the reply to "quit", the SHUTDOWN event. */
    deadline = clock_now_ns() + (int64_t)QMP_FLUSH_TIMEOUT_MS * 1000000;
    for (guint i = 0; i < s->clients->len; i++) {
        qmp_client_flush_blocking(g_ptr_array_index(s->clients, i),
                                  deadline);
    }
    while (s->clients->len) {
        qmp_client_close(g_ptr_array_index(s->clients, 0));
    }
    g_ptr_array_unref(s->clients);
    aio_timer_del(&s->accept_retry);
    qmp_set_accepting(s, false);
    close(s->listen_fd);
    /* Remove the socket file only if it is still the one we created. */
    unix_socket_unlink_if_same(s->path, s->path_dev, s->path_ino);
    g_free(s->path);
    g_free(s->name);
    g_free(s);
}

unsigned qmp_server_num_clients(const QmpServer *s)
{
    g_assert(aio_context_in_home_thread(s->ctx));
    return s->clients->len;
}

uint64_t qmp_server_num_accepted(const QmpServer *s)
{
    g_assert(aio_context_in_home_thread(s->ctx));
    return s->accepted;
}

/* ------------------------------------------------------------------------ */
/* Events                                                                    */

void qmp_event_emit(const char *name, JsonObject *data)
{
    g_autoptr(GPtrArray) targets = g_ptr_array_new();
    JsonObject *ev, *ts;
    JsonNode *node;
    int64_t now;

    assert_main_thread();
    /* Sending may drop a client: take the list first. */
    for (GList *l = qmp_servers; l; l = l->next) {
        QmpServer *s = l->data;

        for (guint i = 0; i < s->clients->len; i++) {
            QmpClient *c = g_ptr_array_index(s->clients, i);

            if (c->negotiated) {
                qmp_client_ref(c);
                g_ptr_array_add(targets, c);
            }
        }
    }
    if (!targets->len) {
        return;
    }
    now = g_get_real_time();
    ev = json_object_new();
    json_object_set_string_member(ev, "event", name);
    if (data) {
        json_object_set_object_member(ev, "data", json_object_ref(data));
    }
    ts = json_object_new();
    json_object_set_int_member(ts, "seconds", now / G_USEC_PER_SEC);
    json_object_set_int_member(ts, "microseconds", now % G_USEC_PER_SEC);
    json_object_set_object_member(ev, "timestamp", ts);
    node = json_node_new(JSON_NODE_OBJECT);
    json_node_take_object(node, ev);
    for (guint i = 0; i < targets->len; i++) {
        QmpClient *c = g_ptr_array_index(targets, i);

        qmp_client_send(c, node);
        qmp_client_unref(c);
    }
    json_node_unref(node);
}
