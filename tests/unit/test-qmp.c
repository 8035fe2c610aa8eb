/*
 * Unit tests for the QMP server and dispatch (include/monitor/qmp.h).
 *
 * The test thread runs a QmpServer in an AioContext of its own (which is
 * also the "main context" the monitor asserts), on a real UNIX socket in
 * a temporary directory, and talks to it as a client over real sockets:
 * it writes without blocking, and while it waits for a reply it turns the
 * loop (aio_poll) and reads.  Commands for the tests are registered here:
 * test-echo returns its arguments, test-big a string of a given size,
 * test-fail an error of a given class, test-nested runs nested event loops
 * as slow commands do.
 *
 * Covered: framing (a message split byte by byte, several in one write,
 * strings holding braces and escaped quotes, the size and nesting limits,
 * garbage and random bytes), the checks of a request and their messages,
 * negotiation, error classes, the argument helpers' messages, events,
 * pretty output, a client that never reads, a client that goes away in
 * the middle of its command, commands that never nest, quit, the socket
 * file and inherited listening sockets, and output flushed at free.
 */
#include "config-host.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <glib.h>
#include <glib/gstdio.h>
#include <json-glib/json-glib.h>

#include "monitor/qmp.h"
#include "util/main-thread.h"
#include "util/clock.h"
#include "test-helpers.h"

#define REPLY_TIMEOUT_NS (10 * NS_PER_SEC)

static AioContext *ctx;
static char *tmp_dir;

/* ------------------------------------------------------------------------ */
/* Test commands                                                             */

static JsonNode *cmd_echo(JsonObject *args, Error **errp)
{
    JsonNode *node = json_node_new(JSON_NODE_OBJECT);

    json_node_set_object(node, args);
    return node;
}

/* test-big {"size": N}: {"s": "xxx...x"} with N x's. */
static JsonNode *cmd_big(JsonObject *args, Error **errp)
{
    static const char *const allowed[] = { "size", NULL };
    int64_t size = 0;
    g_autofree char *s = NULL;
    JsonObject *o;
    JsonNode *node;

    if (!qmp_args_check(args, allowed, errp) ||
        !qmp_arg_int(args, "size", true, 0, 64 << 20, &size, errp)) {
        return NULL;
    }
    s = g_malloc(size + 1);
    memset(s, 'x', size);
    s[size] = '\0';
    o = json_object_new();
    json_object_set_string_member(o, "s", s);
    node = json_node_new(JSON_NODE_OBJECT);
    json_node_take_object(node, o);
    return node;
}

/* test-fail {"class": "device"|"generic"|...}: an error of that class. */
static JsonNode *cmd_fail(JsonObject *args, Error **errp)
{
    const char *cls = "generic";

    if (!qmp_arg_str(args, "class", false, &cls, errp)) {
        return NULL;
    }
    if (!strcmp(cls, "device")) {
        qmp_error_set(errp, QMP_ERROR_CLASS_DEVICE_NOT_FOUND,
                      "Device '%s' not found", "dev0");
    } else if (!strcmp(cls, "command")) {
        qmp_error_set(errp, QMP_ERROR_CLASS_COMMAND_NOT_FOUND, "no such");
    } else {
        error_setg(errp, "It failed: %s", cls);
    }
    return NULL;
}

/*
 * test-nested {"turns": N}: run N non-blocking loop turns (with short
 * sleeps), as a command that waits for an IOThread does; nested_hook, if
 * set, runs first.  Another command must never start meanwhile.
 */
static bool nested_running;
static unsigned nested_violations;
static void (*nested_hook)(void);

static JsonNode *cmd_nested(JsonObject *args, Error **errp)
{
    int64_t turns = 10;
    JsonNode *node;

    if (nested_running) {
        nested_violations++;
    }
    if (!qmp_arg_int(args, "turns", false, 0, 100000, &turns, errp)) {
        return NULL;
    }
    nested_running = true;
    if (nested_hook) {
        nested_hook();
    }
    for (int64_t i = 0; i < turns; i++) {
        aio_poll(ctx, false);
        g_usleep(1000);
    }
    nested_running = false;
    node = json_node_new(JSON_NODE_OBJECT);
    json_node_take_object(node, json_object_new());
    return node;
}

/* test-probe: {} ; counts a violation if it runs inside test-nested. */
static JsonNode *cmd_probe(JsonObject *args, Error **errp)
{
    JsonNode *node;

    if (nested_running) {
        nested_violations++;
    }
    node = json_node_new(JSON_NODE_OBJECT);
    json_node_take_object(node, json_object_new());
    return node;
}

/* ------------------------------------------------------------------------ */
/* Servers and clients                                                       */

static char *sock_path(const char *name)
{
    return g_strdup_printf("%s/%s.sock", tmp_dir, name);
}

static QmpServer *server_new(const char *name, bool pretty)
{
    g_autofree char *path = sock_path(name);
    QmpServerConfig cfg = {
        .path = path, .listen_fd = -1, .pretty = pretty, .name = name,
    };
    Error *err = NULL;
    QmpServer *s = qmp_server_new(&cfg, ctx, &err);

    g_assert_no_error(err);
    g_assert_nonnull(s);
    return s;
}

typedef struct Client {
    int fd;
    GString *in;                 /* received, not yet taken */
    bool eof;
} Client;

static Client *client_connect_path(const char *path)
{
    struct sockaddr_un sun = { .sun_family = AF_UNIX };
    Client *c = g_new0(Client, 1);

    g_assert_cmpuint(strlen(path), <, sizeof(sun.sun_path));
    strcpy(sun.sun_path, path);
    c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    g_assert_cmpint(c->fd, >=, 0);
    /* The kernel completes a UNIX connect() against the backlog. */
    g_assert_cmpint(connect(c->fd, (struct sockaddr *)&sun, sizeof(sun)),
                    ==, 0);
    c->in = g_string_new(NULL);
    return c;
}

static void client_free(Client *c)
{
    if (c->fd >= 0) {
        close(c->fd);
    }
    g_string_free(c->in, TRUE);
    g_free(c);
}

/* One loop turn and whatever the socket has; false if nothing came. */
static bool client_pump(Client *c)
{
    char buf[65536];
    ssize_t n;
    bool got = false;

    aio_poll(ctx, false);
    while (!c->eof) {
        n = recv(c->fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (n > 0) {
            g_string_append_len(c->in, buf, n);
            got = true;
        } else if (n == 0) {
            c->eof = true;
        } else {
            g_assert(errno == EAGAIN || errno == EWOULDBLOCK ||
                     errno == ECONNRESET);
            if (errno == ECONNRESET) {
                c->eof = true;
            }
            break;
        }
    }
    return got;
}

/* Write all of data, turning the loop while the socket is full. */
static void client_send_len(Client *c, const char *data, size_t len)
{
    int64_t deadline = clock_now_ns() + REPLY_TIMEOUT_NS;
    size_t off = 0;

    while (off < len) {
        ssize_t n = send(c->fd, data + off, len - off,
                         MSG_DONTWAIT | MSG_NOSIGNAL);

        if (n > 0) {
            off += n;
            continue;
        }
        g_assert(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
        g_assert_cmpint(clock_now_ns(), <, deadline);
        aio_poll(ctx, false);
    }
}

static void client_send(Client *c, const char *text)
{
    client_send_len(c, text, strlen(text));
}

/* The next line (without "\n"); fails after REPLY_TIMEOUT_NS. */
static char *client_line(Client *c)
{
    int64_t deadline = clock_now_ns() + REPLY_TIMEOUT_NS;
    char *nl;

    while (!(nl = memchr(c->in->str, '\n', c->in->len))) {
        g_assert_false(c->eof);
        if (!client_pump(c)) {
            struct pollfd pfd = { .fd = c->fd, .events = POLLIN };

            g_assert_cmpint(clock_now_ns(), <, deadline);
            poll(&pfd, 1, 1);
        }
    }
    {
        size_t len = nl - c->in->str;
        char *line = g_strndup(c->in->str, len);

        g_string_erase(c->in, 0, len + 1);
        return line;
    }
}

static JsonNode *parse_json(const char *text)
{
    g_autoptr(JsonParser) p = json_parser_new();
    GError *err = NULL;

    if (!json_parser_load_from_data(p, text, -1, &err)) {
        g_test_message("not JSON: %s: %s", err->message, text);
        g_assert_not_reached();
    }
    return json_node_copy(json_parser_get_root(p));
}

/* The next message (one line) as an object; the caller unrefs. */
static JsonObject *client_msg(Client *c)
{
    g_autofree char *line = client_line(c);
    g_autoptr(JsonNode) node = parse_json(line);

    g_assert_true(JSON_NODE_HOLDS_OBJECT(node));
    return json_object_ref(json_node_get_object(node));
}

/* Turn the loop for about ms and assert that nothing arrives. */
static void client_expect_silence(Client *c, int ms)
{
    int64_t end = clock_now_ns() + ms * NS_PER_MS;

    while (clock_now_ns() < end) {
        client_pump(c);
        g_assert_cmpuint(c->in->len, ==, 0);
        g_usleep(1000);
    }
}

/* Turn the loop until the server closed c (reading what it sent). */
static void client_wait_eof(Client *c)
{
    int64_t deadline = clock_now_ns() + REPLY_TIMEOUT_NS;

    while (!c->eof) {
        if (!client_pump(c)) {
            g_assert_cmpint(clock_now_ns(), <, deadline);
            g_usleep(1000);
        }
    }
}

static void loop_until_clients(QmpServer *s, unsigned n)
{
    int64_t deadline = clock_now_ns() + REPLY_TIMEOUT_NS;

    while (qmp_server_num_clients(s) != n) {
        g_assert_cmpint(clock_now_ns(), <, deadline);
        aio_poll(ctx, false);
        g_usleep(1000);
    }
}

/* Connect, check the greeting's shape. */
static Client *client_new(const char *name)
{
    g_autofree char *path = sock_path(name);
    Client *c = client_connect_path(path);
    g_autoptr(JsonObject) greeting = client_msg(c);
    JsonObject *qmp, *version, *qemu;
    int major = -1, minor = -1, micro = -1;

    g_assert_cmpint(sscanf(SPINDLE_VERSION, "%d.%d.%d", &major, &minor,
                           &micro), ==, 3);
    g_assert_cmpuint(json_object_get_size(greeting), ==, 1);
    qmp = json_object_get_object_member(greeting, "QMP");
    g_assert_nonnull(qmp);
    g_assert_cmpuint(json_array_get_length(
        json_object_get_array_member(qmp, "capabilities")), ==, 0);
    version = json_object_get_object_member(qmp, "version");
    g_assert_cmpstr(json_object_get_string_member(version, "package"), ==,
                    "spindle " SPINDLE_VERSION);
    qemu = json_object_get_object_member(version, "qemu");
    g_assert_cmpint(json_object_get_int_member(qemu, "major"), ==, major);
    g_assert_cmpint(json_object_get_int_member(qemu, "minor"), ==, minor);
    g_assert_cmpint(json_object_get_int_member(qemu, "micro"), ==, micro);
    return c;
}

static void assert_return_empty(JsonObject *reply)
{
    JsonNode *ret = json_object_get_member(reply, "return");

    g_assert_nonnull(ret);
    g_assert_true(JSON_NODE_HOLDS_OBJECT(ret));
    g_assert_cmpuint(json_object_get_size(json_node_get_object(ret)), ==, 0);
}

static void client_negotiate(Client *c)
{
    g_autoptr(JsonObject) reply = NULL;

    client_send(c, "{\"execute\": \"qmp_capabilities\"}");
    reply = client_msg(c);
    assert_return_empty(reply);
    g_assert_false(json_object_has_member(reply, "id"));
}

/* Assert reply is an error of class cls with text desc (NULL: any). */
static void assert_error(JsonObject *reply, const char *cls,
                         const char *desc)
{
    JsonObject *e = json_object_get_object_member(reply, "error");

    g_assert_nonnull(e);
    g_assert_false(json_object_has_member(reply, "return"));
    g_assert_cmpstr(json_object_get_string_member(e, "class"), ==, cls);
    if (desc) {
        g_assert_cmpstr(json_object_get_string_member(e, "desc"), ==, desc);
    }
}

/* Read the next reply and assert it is that error, without an id. */
static void expect_error(Client *c, const char *cls, const char *desc)
{
    g_autoptr(JsonObject) reply = client_msg(c);

    assert_error(reply, cls, desc);
    g_assert_false(json_object_has_member(reply, "id"));
}

/* The next reply must be a success with integer id. */
static JsonObject *expect_return_id(Client *c, int64_t id)
{
    JsonObject *reply = client_msg(c);

    g_assert_true(json_object_has_member(reply, "return"));
    g_assert_cmpint(json_object_get_int_member(reply, "id"), ==, id);
    return reply;
}

/* ------------------------------------------------------------------------ */
/* Greeting, negotiation, request checks                                     */

static void test_greeting_and_counts(void)
{
    QmpServer *s = server_new("greet", false);
    Client *a, *b;

    g_assert_cmpuint(qmp_server_num_clients(s), ==, 0);
    g_assert_cmpuint(qmp_server_num_accepted(s), ==, 0);
    a = client_new("greet");
    b = client_new("greet");
    g_assert_cmpuint(qmp_server_num_clients(s), ==, 2);
    g_assert_cmpuint(qmp_server_num_accepted(s), ==, 2);
    client_free(a);
    loop_until_clients(s, 1);
    client_free(b);
    loop_until_clients(s, 0);
    g_assert_cmpuint(qmp_server_num_accepted(s), ==, 2);
    qmp_server_free(s);
}

static void test_negotiation(void)
{
    QmpServer *s = server_new("nego", false);
    Client *c = client_new("nego");
    g_autoptr(JsonObject) r = NULL;

    client_send(c, "{\"execute\": \"query-version\", \"id\": 1}");
    r = client_msg(c);
    assert_error(r, "CommandNotFound",
                 "Expecting capabilities negotiation with "
                 "'qmp_capabilities'");
    g_assert_cmpint(json_object_get_int_member(r, "id"), ==, 1);

    /* Unknown commands are also refused before negotiation. */
    client_send(c, "{\"execute\": \"no-such\"}");
    expect_error(c, "CommandNotFound", "Expecting capabilities negotiation "
                 "with 'qmp_capabilities'");

    /* We offer no capability, not even oob: nothing is negotiated. */
    client_send(c, "{\"execute\": \"qmp_capabilities\", "
                   "\"arguments\": {\"enable\": [\"oob\"]}}");
    expect_error(c, "GenericError", "Capability 'oob' not available");
    client_send(c, "{\"execute\": \"qmp_capabilities\", "
                   "\"arguments\": {\"enable\": \"oob\"}}");
    expect_error(c, "GenericError",
                 "Invalid parameter type for 'enable', expected: array");
    client_send(c, "{\"execute\": \"qmp_capabilities\", "
                   "\"arguments\": {\"bogus\": 1}}");
    expect_error(c, "GenericError", "Parameter 'bogus' is unexpected");
    client_send(c, "{\"execute\": \"test-probe\"}");
    expect_error(c, "CommandNotFound", "Expecting capabilities negotiation "
                 "with 'qmp_capabilities'");

    client_send(c, "{\"execute\": \"qmp_capabilities\", "
                   "\"arguments\": {\"enable\": []}, \"id\": \"n\"}");
    g_clear_pointer(&r, json_object_unref);
    r = client_msg(c);
    assert_return_empty(r);
    g_assert_cmpstr(json_object_get_string_member(r, "id"), ==, "n");

    client_send(c, "{\"execute\": \"qmp_capabilities\"}");
    expect_error(c, "CommandNotFound", "Capabilities negotiation is already "
                 "complete, command ignored");
    client_send(c, "{\"execute\": \"no-such\"}");
    expect_error(c, "CommandNotFound", "The command no-such has not been "
                 "found");
    client_send(c, "{\"execute\": \"test-probe\", \"id\": 7}");
    g_clear_pointer(&r, json_object_unref);
    r = expect_return_id(c, 7);
    assert_return_empty(r);

    client_free(c);
    qmp_server_free(s);
}

static void test_request_checks(void)
{
    static const struct {
        const char *in;
        const char *desc;
    } cases[] = {
        { "[1, 2]", "QMP input must be a JSON object" },
        { "\"execute\"", "QMP input must be a JSON object" },
        { "{}", "QMP input lacks member 'execute'" },
        { "{\"execute\": 1}", "QMP input member 'execute' must be a string" },
        { "{\"execute\": [\"x\"]}",
          "QMP input member 'execute' must be a string" },
        { "{\"execute\": \"test-echo\", \"arguments\": [1]}",
          "QMP input member 'arguments' must be an object" },
        { "{\"execute\": \"test-echo\", \"arguments\": null}",
          "QMP input member 'arguments' must be an object" },
        { "{\"execute\": \"test-echo\", \"exec-oob\": \"x\"}",
          "QMP input member 'exec-oob' is unexpected" },
        { "{\"execute\": \"test-echo\", \"control\": {}}",
          "QMP input member 'control' is unexpected" },
        { "{\"a\": 1e400}", "JSON parse error, number out of range" },
    };
    QmpServer *s = server_new("checks", false);
    Client *c = client_new("checks");

    client_negotiate(c);
    for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
        g_test_message("input: %s", cases[i].in);
        client_send(c, cases[i].in);
        expect_error(c, "GenericError", cases[i].desc);
    }

    /* The id is echoed in errors when the object could be read, whatever
     * JSON value it is. */
    {
        static const char *const ids[] = {
            "1", "\"abc\"", "null", "[1, {\"x\": \"}\"}]", "{\"a\": [true]}",
            "-2.5",
        };

        for (size_t i = 0; i < G_N_ELEMENTS(ids); i++) {
            g_autofree char *in = g_strdup_printf("{\"id\": %s, \"bogus\": "
                                                  "1, \"execute\": \"x\"}",
                                                  ids[i]);
            g_autofree char *ok = g_strdup_printf("{\"execute\": "
                                                  "\"test-probe\", \"id\": "
                                                  "%s}", ids[i]);
            g_autoptr(JsonNode) want = parse_json(ids[i]);
            g_autoptr(JsonObject) r1 = NULL;
            g_autoptr(JsonObject) r2 = NULL;

            client_send(c, in);
            r1 = client_msg(c);
            assert_error(r1, "GenericError",
                         "QMP input member 'bogus' is unexpected");
            g_assert_true(json_node_equal(json_object_get_member(r1, "id"),
                                          want));
            client_send(c, ok);
            r2 = client_msg(c);
            assert_return_empty(r2);
            g_assert_true(json_node_equal(json_object_get_member(r2, "id"),
                                          want));
        }
    }

    /* Parse errors: GenericError, json-glib's message after ours. */
    {
        g_autoptr(JsonObject) r = NULL;
        const char *desc;

        client_send(c, "{\"execute\": \"x\",}");
        r = client_msg(c);
        assert_error(r, "GenericError", NULL);
        desc = json_object_get_string_member(
            json_object_get_object_member(r, "error"), "desc");
        g_assert_true(g_str_has_prefix(desc, "JSON parse error, "));
        g_assert_cmpuint(strlen(desc), >, strlen("JSON parse error, "));
    }
    client_send(c, "{\"execute\": \"x\", \"a\": \"\xff\"}");
    expect_error(c, "GenericError", "JSON parse error, JSON data must be "
                 "UTF-8 encoded");

    client_free(c);
    qmp_server_free(s);
}

/* ------------------------------------------------------------------------ */
/* Framing                                                                   */

static void test_framing_byte_by_byte(void)
{
    static const char msgs[] =
        "{\"execute\": \"test-echo\", \"arguments\": {\"s\": \"a}b\"}, "
        "\"id\": 1}"
        "{\"execute\": \"test-echo\", \"arguments\": {\"l\": [[1], {}]}, "
        "\"id\": 2}";
    size_t first_end = strchr(msgs, '}') - msgs;  /* inside the string */
    QmpServer *s = server_new("bytes", false);
    Client *c = client_new("bytes");
    g_autoptr(JsonObject) r1 = NULL;
    g_autoptr(JsonObject) r2 = NULL;
    size_t len = strlen(msgs);
    size_t end1 = strstr(msgs, "\"id\": 1}") - msgs + strlen("\"id\": 1}");

    client_negotiate(c);
    g_assert_cmpuint(first_end, <, end1);
    for (size_t i = 0; i < len; i++) {
        client_send_len(c, msgs + i, 1);
        if (i + 1 < end1) {
            /* No reply before the first message is complete. */
            client_pump(c);
            client_pump(c);
            g_assert_cmpuint(c->in->len, ==, 0);
        }
    }
    r1 = expect_return_id(c, 1);
    g_assert_cmpstr(json_object_get_string_member(
        json_object_get_object_member(r1, "return"), "s"), ==, "a}b");
    r2 = expect_return_id(c, 2);
    g_assert_true(json_object_has_member(
        json_object_get_object_member(r2, "return"), "l"));
    client_free(c);
    qmp_server_free(s);
}

static void test_framing_several_in_one_write(void)
{
    QmpServer *s = server_new("several", false);
    Client *c = client_new("several");

    client_negotiate(c);
    /* No separator, then spaces, tabs and newlines between messages. */
    client_send(c, "{\"execute\":\"test-probe\",\"id\":1}"
                   "{\"execute\":\"test-probe\",\"id\":2}  \t\r\n\n"
                   "{\"execute\":\"test-probe\",\"id\":3}\n");
    for (int64_t id = 1; id <= 3; id++) {
        g_autoptr(JsonObject) r = expect_return_id(c, id);
    }
    client_expect_silence(c, 20);
    client_free(c);
    qmp_server_free(s);
}

static void test_framing_strings(void)
{
    /* Braces, brackets, escaped quotes and backslashes inside strings,
     * in the arguments and in the id. */
    static const char msg[] =
        "{\"execute\": \"test-echo\", \"arguments\": "
        "{\"s\": \"}{][\\\"\\\\\", \"t\": \"\\\\\\\"}\"}, "
        "\"id\": \"{\\\"}\"}";
    QmpServer *s = server_new("strings", false);
    Client *c = client_new("strings");
    g_autoptr(JsonObject) r = NULL;
    JsonObject *ret;

    client_negotiate(c);
    client_send(c, msg);
    r = client_msg(c);
    ret = json_object_get_object_member(r, "return");
    g_assert_nonnull(ret);
    g_assert_cmpstr(json_object_get_string_member(ret, "s"), ==,
                    "}{][\"\\");
    g_assert_cmpstr(json_object_get_string_member(ret, "t"), ==, "\\\"}");
    g_assert_cmpstr(json_object_get_string_member(r, "id"), ==, "{\"}");
    client_free(c);
    qmp_server_free(s);
}

/*
 * A framing limit of the QMP server: a request at the limit (request(limit),
 * with id id) is answered; one over it gets one GenericError (error, a
 * format for the limit) and the connection goes on, even after something
 * far over it (far_over appends it).  The probes sent after use ids id + 1
 * and id + 2.
 */
typedef struct FramingLimit {
    const char *name;
    char *(*request)(unsigned n);
    unsigned limit;
    const char *error;
    int64_t id;
    void (*far_over)(GString *s);
} FramingLimit;

static void send_probe_id(Client *c, int64_t id)
{
    g_autofree char *probe = g_strdup_printf("{\"execute\": \"test-probe\", "
                                             "\"id\": %" PRId64 "}", id);

    client_send(c, probe);
}

static void test_framing(const void *arg)
{
    const FramingLimit *f = arg;
    g_autofree char *fits = f->request(f->limit);
    g_autofree char *over = f->request(f->limit + 1);
    g_autofree char *want = g_strdup_printf(f->error, f->limit);
    QmpServer *s = server_new(f->name, false);
    Client *c = client_new(f->name);
    GString *far = g_string_new(NULL);

    client_negotiate(c);
    client_send(c, fits);
    json_object_unref(expect_return_id(c, f->id));
    client_send(c, over);
    expect_error(c, "GenericError", want);
    send_probe_id(c, f->id + 1);
    json_object_unref(expect_return_id(c, f->id + 1));

    /* Far over the limit: still one error, and the end is still found. */
    f->far_over(far);
    g_string_append_printf(far, "{\"execute\": \"test-probe\", "
                           "\"id\": %" PRId64 "}", f->id + 2);
    client_send_len(c, far->str, far->len);
    expect_error(c, "GenericError", want);
    json_object_unref(expect_return_id(c, f->id + 2));
    client_expect_silence(c, 20);
    g_string_free(far, TRUE);
    client_free(c);
    qmp_server_free(s);
}

/* {"execute": "test-echo", "arguments": {"s": "xxx"}, "id": 9} padded
 * to exactly len bytes. */
static char *echo_of_len(unsigned len)
{
    static const char head[] =
        "{\"execute\": \"test-echo\", \"arguments\": {\"s\": \"";
    static const char tail[] = "\"}, \"id\": 9}";
    size_t fill = len - strlen(head) - strlen(tail);
    GString *s = g_string_sized_new(len + 1);

    g_string_append(s, head);
    for (size_t i = 0; i < fill; i++) {
        g_string_append_c(s, 'x');
    }
    g_string_append(s, tail);
    g_assert_cmpuint(s->len, ==, len);
    return g_string_free(s, FALSE);
}

/* With braces in the discarded part. */
static void far_too_large(GString *s)
{
    g_string_append(s, "{\"a\": [");
    for (unsigned i = 0; i < 3 * QMP_MAX_MESSAGE / 8; i++) {
        g_string_append(s, "{\"}\":1},");
    }
    g_string_append(s, "0]}");
}

/* {"execute": "test-echo", "arguments": {"v": [[...]]}} nested depth
 * levels deep in total (the request object counts). */
static char *nested_of_depth(unsigned depth)
{
    GString *s = g_string_new("{\"execute\": \"test-echo\", \"id\": 5, "
                              "\"arguments\": {\"v\": ");

    g_assert_cmpuint(depth, >=, 3);
    for (unsigned i = 0; i < depth - 2; i++) {
        g_string_append_c(s, '[');
    }
    for (unsigned i = 0; i < depth - 2; i++) {
        g_string_append_c(s, ']');
    }
    g_string_append(s, "}}");
    return g_string_free(s, FALSE);
}

/* 100000 levels: no stack or memory blow-up. */
static void far_too_deep(GString *s)
{
    for (unsigned i = 0; i < 100000; i++) {
        g_string_append_c(s, '[');
    }
    for (unsigned i = 0; i < 100000; i++) {
        g_string_append_c(s, ']');
    }
}

static const FramingLimit too_large = {
    "large", echo_of_len, QMP_MAX_MESSAGE,
    "JSON parse error, message too large (more than %u bytes)", 9,
    far_too_large,
};

static const FramingLimit too_deep = {
    "deep", nested_of_depth, QMP_MAX_NESTING,
    "JSON parse error, nesting too deep (more than %u levels)", 5,
    far_too_deep,
};

/* Count the error replies that arrive within ms; fail on anything else. */
static unsigned count_errors(Client *c, int ms)
{
    int64_t end = clock_now_ns() + ms * NS_PER_MS;
    unsigned n = 0;

    while (clock_now_ns() < end) {
        client_pump(c);
        while (memchr(c->in->str, '\n', c->in->len)) {
            g_autoptr(JsonObject) r = client_msg(c);

            assert_error(r, "GenericError", NULL);
            n++;
        }
        g_usleep(1000);
    }
    return n;
}

static void test_framing_garbage(void)
{
    QmpServer *s = server_new("garbage", false);
    Client *c = client_new("garbage");
    g_autoptr(JsonObject) r = NULL;

    client_negotiate(c);

    /* A bare word ends at the newline: one error. */
    client_send(c, "foo\n");
    r = client_msg(c);
    assert_error(r, "GenericError", NULL);
    g_assert_true(g_str_has_prefix(json_object_get_string_member(
        json_object_get_object_member(r, "error"), "desc"),
        "JSON parse error, "));
    g_clear_pointer(&r, json_object_unref);
    client_expect_silence(c, 20);

    /* A stray ']' right before a message: one error, then the message. */
    client_send(c, "]{\"execute\": \"test-probe\", \"id\": 1}");
    expect_error(c, "GenericError", NULL);
    r = expect_return_id(c, 1);
    g_clear_pointer(&r, json_object_unref);

    /* A stray closing bracket is answered at once, one error each. */
    client_send(c, "]");
    expect_error(c, "GenericError", NULL);
    client_send(c, "}]");
    expect_error(c, "GenericError", NULL);
    expect_error(c, "GenericError", NULL);
    client_send(c, "x}");
    expect_error(c, "GenericError", NULL);
    expect_error(c, "GenericError", NULL);
    client_expect_silence(c, 20);

    /* Scalars are JSON, but not objects. */
    client_send(c, "123 true\n");
    expect_error(c, "GenericError", "QMP input must be a JSON object");
    expect_error(c, "GenericError", "QMP input must be a JSON object");

    /* Two bad words, two errors; nothing more. */
    client_send(c, "bar baz\n{\"execute\": \"test-probe\", \"id\": 2}");
    expect_error(c, "GenericError", NULL);
    expect_error(c, "GenericError", NULL);
    r = expect_return_id(c, 2);
    g_clear_pointer(&r, json_object_unref);

    /* A mismatched bracket closes the message: a parse error. */
    client_send(c, "{\"execute\": \"test-probe\"]{\"execute\": "
                   "\"test-probe\", \"id\": 3}");
    expect_error(c, "GenericError", NULL);
    r = expect_return_id(c, 3);
    g_clear_pointer(&r, json_object_unref);

    /* Over-long garbage: one "too large", then resync at '{'. */
    {
        GString *junk = g_string_new(NULL);

        for (unsigned i = 0; i < QMP_MAX_MESSAGE + 100; i++) {
            g_string_append_c(junk, 'z');
        }
        g_string_append(junk, "{\"execute\": \"test-probe\", \"id\": 4}");
        client_send_len(c, junk->str, junk->len);
        g_string_free(junk, TRUE);
    }
    expect_error(c, "GenericError", NULL);
    r = expect_return_id(c, 4);
    client_expect_silence(c, 20);
    client_free(c);
    qmp_server_free(s);
}

/*
 * Random bytes (weighted towards JSON's structural characters): every
 * reply is a well-formed error, the server's memory stays bounded (it
 * keeps up and answers), and a fresh connection works afterwards.
 */
static void test_framing_random(void)
{
    static const char alphabet[] = "{}[]\"\\:, \nabc01\t";
    QmpServer *s = server_new("random", false);
    Client *c = client_new("random");
    GString *junk = g_string_new(NULL);
    g_autoptr(JsonObject) r = NULL;

    client_negotiate(c);
    for (unsigned i = 0; i < 200000; i++) {
        if (g_test_rand_int_range(0, 8)) {
            g_string_append_c(junk, alphabet[g_test_rand_int_range(
                0, sizeof(alphabet) - 1)]);
        } else {
            g_string_append_c(junk, (char)g_test_rand_int_range(0, 256));
        }
    }
    client_send_len(c, junk->str, junk->len);
    g_string_free(junk, TRUE);
    g_test_message("%u error replies to random input", count_errors(c, 200));
    g_assert_false(c->eof);
    g_assert_cmpuint(qmp_server_num_clients(s), ==, 1);
    client_free(c);
    loop_until_clients(s, 0);

    c = client_new("random");
    client_negotiate(c);
    client_send(c, "{\"execute\": \"test-probe\", \"id\": 1}");
    r = expect_return_id(c, 1);
    client_free(c);
    qmp_server_free(s);
}

/* ------------------------------------------------------------------------ */
/* Dispatch, error classes, arguments                                        */

static void test_dispatch(void)
{
    g_autoptr(GPtrArray) names = qmp_command_names();
    g_autoptr(JsonObject) args = json_object_new();
    Error *err = NULL;
    JsonNode *ret;
    bool seen_caps = false, seen_echo = false;

    for (guint i = 0; i < names->len; i++) {
        const char *n = g_ptr_array_index(names, i);

        if (i > 0) {
            g_assert_cmpint(strcmp(g_ptr_array_index(names, i - 1), n), <, 0);
        }
        seen_caps |= !strcmp(n, "qmp_capabilities");
        seen_echo |= !strcmp(n, "test-echo");
    }
    g_assert_true(seen_caps && seen_echo);

    ret = qmp_dispatch("no-such", NULL, &err);
    g_assert_null(ret);
    g_assert_error(err, QMP_ERROR, QMP_ERROR_CLASS_COMMAND_NOT_FOUND);
    g_assert_cmpstr(error_get_pretty(err), ==,
                    "The command no-such has not been found");
    g_clear_error(&err);

    /* No arguments: the handler gets an empty object. */
    ret = qmp_dispatch("test-echo", NULL, &err);
    g_assert_no_error(err);
    g_assert_true(JSON_NODE_HOLDS_OBJECT(ret));
    g_assert_cmpuint(json_object_get_size(json_node_get_object(ret)), ==, 0);
    json_node_unref(ret);

    json_object_set_string_member(args, "class", "device");
    ret = qmp_dispatch("test-fail", args, &err);
    g_assert_null(ret);
    g_assert_error(err, QMP_ERROR, QMP_ERROR_CLASS_DEVICE_NOT_FOUND);
    g_clear_error(&err);

    json_object_set_string_member(args, "class", "generic");
    ret = qmp_dispatch("test-fail", args, &err);
    g_assert_null(ret);
    g_assert_error(err, SPINDLE_ERROR, 0);
    g_assert_cmpstr(error_get_pretty(err), ==, "It failed: generic");
    g_clear_error(&err);

    /* query-version through dispatch, as a client would see it. */
    ret = qmp_dispatch("query-version", NULL, &err);
    g_assert_no_error(err);
    g_assert_cmpstr(json_object_get_string_member(json_node_get_object(ret),
                                                  "package"), ==,
                    "spindle " SPINDLE_VERSION);
    json_node_unref(ret);
    ret = qmp_dispatch("query-version", args, &err);
    g_assert_null(ret);
    g_assert_cmpstr(error_get_pretty(err), ==,
                    "Parameter 'class' is unexpected");
    g_clear_error(&err);
}

static void test_error_classes_on_the_wire(void)
{
    QmpServer *s = server_new("classes", false);
    Client *c = client_new("classes");
    g_autoptr(JsonObject) r = NULL;

    client_negotiate(c);
    client_send(c, "{\"execute\": \"test-fail\", \"arguments\": "
                   "{\"class\": \"device\"}, \"id\": \"d\"}");
    r = client_msg(c);
    assert_error(r, "DeviceNotFound", "Device 'dev0' not found");
    g_assert_cmpstr(json_object_get_string_member(r, "id"), ==, "d");
    client_send(c, "{\"execute\": \"test-fail\", \"arguments\": "
                   "{\"class\": \"command\"}}");
    expect_error(c, "CommandNotFound", "no such");
    client_send(c, "{\"execute\": \"test-fail\"}");
    expect_error(c, "GenericError", "It failed: generic");
    client_send(c, "{\"execute\": \"test-fail\", \"arguments\": "
                   "{\"class\": 3}}");
    expect_error(c, "GenericError",
                 "Invalid parameter type for 'class', expected: string");
    client_free(c);
    qmp_server_free(s);
}

static JsonObject *args_from(const char *json)
{
    g_autoptr(JsonNode) node = parse_json(json);

    return json_object_ref(json_node_get_object(node));
}

static void expect_arg_error(Error **errp, const char *msg)
{
    g_assert_nonnull(*errp);
    g_assert_cmpstr(error_get_pretty(*errp), ==, msg);
    g_clear_error(errp);
}

/* The JSON types of the qmp_arg_*() readers, as their errors name them. */
static const char *const arg_types[] = {
    "string", "integer", "boolean", "object",
};

/* Read member key of args with the qmp_arg_*() reader of type. */
static bool arg_get(JsonObject *args, const char *key, bool required,
                    const char *type, Error **errp)
{
    const char *s;
    int64_t i;
    bool b;
    JsonObject *o;

    if (!strcmp(type, "string")) {
        return qmp_arg_str(args, key, required, &s, errp);
    } else if (!strcmp(type, "integer")) {
        return qmp_arg_int(args, key, required, 0, 10, &i, errp);
    } else if (!strcmp(type, "boolean")) {
        return qmp_arg_bool(args, key, required, &b, errp);
    }
    g_assert_cmpstr(type, ==, "object");
    return qmp_arg_object(args, key, required, &o, errp);
}

static void test_args(void)
{
    static const char *const allowed[] = { "s", "i", "b", "o", "f", "n",
                                           "big", NULL };
    /* Members read as the wrong type. */
    static const struct {
        const char *key;
        bool required;
        const char *type;
    } wrong[] = {
        { "i", true, "string" },
        { "n", false, "string" },
        { "f", true, "integer" },
        { "s", true, "integer" },
        { "b", true, "integer" },
        { "s", true, "boolean" },
        { "i", true, "boolean" },
        { "s", true, "object" },
    };
    g_autoptr(JsonObject) a = args_from(
        "{\"s\": \"str\", \"i\": 42, \"b\": true, \"o\": {\"x\": 1}, "
        "\"f\": 1.0, \"n\": null, \"big\": -9000000000}");
    Error *err = NULL;
    const char *s = "default";
    int64_t i = -1;
    bool b = false;
    JsonObject *o = NULL;

    /* Present and right. */
    g_assert_true(qmp_arg_str(a, "s", true, &s, &err));
    g_assert_cmpstr(s, ==, "str");
    g_assert_true(qmp_arg_int(a, "i", true, 0, 100, &i, &err));
    g_assert_cmpint(i, ==, 42);
    g_assert_true(qmp_arg_int(a, "big", true, INT64_MIN, 0, &i, &err));
    g_assert_cmpint(i, ==, -9000000000LL);
    g_assert_true(qmp_arg_bool(a, "b", true, &b, &err));
    g_assert_true(b);
    g_assert_true(qmp_arg_object(a, "o", true, &o, &err));
    g_assert_cmpint(json_object_get_int_member(o, "x"), ==, 1);
    g_assert_no_error(err);

    /* Missing: required fails, optional leaves the default. */
    s = "default";
    g_assert_true(qmp_arg_str(a, "zz", false, &s, &err));
    g_assert_cmpstr(s, ==, "default");
    i = 7;
    g_assert_true(qmp_arg_int(a, "zz", false, 0, 10, &i, &err));
    g_assert_cmpint(i, ==, 7);
    g_assert_true(qmp_arg_bool(a, "zz", false, &b, &err));
    g_assert_true(qmp_arg_object(a, "zz", false, &o, &err));
    g_assert_no_error(err);
    for (size_t t = 0; t < G_N_ELEMENTS(arg_types); t++) {
        g_assert_false(arg_get(a, "zz", true, arg_types[t], &err));
        expect_arg_error(&err, "Parameter 'zz' is missing");
    }

    /* Wrong JSON types; a float (even 1.0) is not an integer; null is
     * not a string. */
    for (size_t k = 0; k < G_N_ELEMENTS(wrong); k++) {
        g_autofree char *want = g_strdup_printf(
            "Invalid parameter type for '%s', expected: %s", wrong[k].key,
            wrong[k].type);

        g_assert_false(arg_get(a, wrong[k].key, wrong[k].required,
                               wrong[k].type, &err));
        expect_arg_error(&err, want);
    }

    /* Range. */
    i = 3;
    g_assert_false(qmp_arg_int(a, "i", true, 0, 41, &i, &err));
    expect_arg_error(&err, "Parameter 'i' expects a value between 0 and "
                     "41");
    g_assert_cmpint(i, ==, 3);
    g_assert_false(qmp_arg_int(a, "i", true, 43, 50, &i, &err));
    expect_arg_error(&err, "Parameter 'i' expects a value between 43 and "
                     "50");
    g_assert_true(qmp_arg_int(a, "i", true, 42, 42, &i, &err));

    /* Unexpected members, in order. */
    g_assert_true(qmp_args_check(a, allowed, &err));
    g_assert_no_error(err);
    g_assert_false(qmp_args_check(a, allowed + 1, &err));
    expect_arg_error(&err, "Parameter 's' is unexpected");
    g_assert_false(qmp_args_check(a, NULL, &err));
    expect_arg_error(&err, "Parameter 's' is unexpected");
    {
        g_autoptr(JsonObject) empty = json_object_new();

        g_assert_true(qmp_args_check(empty, NULL, &err));
    }
    {
        static const char *const some[] = { "s", "i", "b", NULL };

        g_assert_false(qmp_args_check(a, some, &err));
        expect_arg_error(&err, "Parameter 'o' is unexpected");
    }
}

/* ------------------------------------------------------------------------ */
/* Events, pretty output                                                     */

static void check_event(JsonObject *ev, const char *name, int64_t before_us)
{
    JsonObject *ts = json_object_get_object_member(ev, "timestamp");
    int64_t sec, usec, at;

    g_assert_cmpstr(json_object_get_string_member(ev, "event"), ==, name);
    g_assert_nonnull(ts);
    sec = json_object_get_int_member(ts, "seconds");
    usec = json_object_get_int_member(ts, "microseconds");
    g_assert_cmpint(usec, >=, 0);
    g_assert_cmpint(usec, <, 1000000);
    at = sec * G_USEC_PER_SEC + usec;
    g_assert_cmpint(at, >=, before_us);
    g_assert_cmpint(at, <=, g_get_real_time());
}

static void test_events(void)
{
    QmpServer *s1 = server_new("ev1", false);
    QmpServer *s2 = server_new("ev2", false);
    Client *a = client_new("ev1");
    Client *b = client_new("ev2");
    Client *quiet = client_new("ev1");      /* never negotiates */
    g_autoptr(JsonObject) data = json_object_new();
    int64_t before = g_get_real_time();

    client_negotiate(a);
    client_negotiate(b);
    json_object_set_string_member(data, "device", "exp0");
    json_object_set_int_member(data, "n", 3);
    qmp_event_emit("TEST_EVENT", data);
    qmp_event_emit("TEST_NO_DATA", NULL);
    for (int k = 0; k < 2; k++) {
        Client *c = k ? b : a;
        g_autoptr(JsonObject) e1 = client_msg(c);
        g_autoptr(JsonObject) e2 = client_msg(c);
        JsonObject *d;

        check_event(e1, "TEST_EVENT", before);
        d = json_object_get_object_member(e1, "data");
        g_assert_cmpstr(json_object_get_string_member(d, "device"), ==,
                        "exp0");
        g_assert_cmpint(json_object_get_int_member(d, "n"), ==, 3);
        check_event(e2, "TEST_NO_DATA", before);
        g_assert_false(json_object_has_member(e2, "data"));
    }
    client_expect_silence(quiet, 20);

    /* After its server is gone, a client gets no more events (and
     * nothing breaks). */
    qmp_server_free(s2);
    client_wait_eof(b);
    qmp_event_emit("TEST_AFTER", NULL);
    {
        g_autoptr(JsonObject) e = client_msg(a);

        check_event(e, "TEST_AFTER", before);
    }
    client_free(a);
    client_free(b);
    client_free(quiet);
    qmp_server_free(s1);
    qmp_event_emit("TEST_NOBODY", NULL);
}

/* The next pretty message: it ends with a '}' alone on its line. */
static JsonObject *client_pretty_msg(Client *c, char **text_out)
{
    int64_t deadline = clock_now_ns() + REPLY_TIMEOUT_NS;
    char *end;
    JsonObject *o;

    while (!(end = strstr(c->in->str, "\n}\n"))) {
        g_assert_false(c->eof);
        if (!client_pump(c)) {
            g_assert_cmpint(clock_now_ns(), <, deadline);
            g_usleep(1000);
        }
    }
    {
        size_t len = end - c->in->str + 3;
        g_autofree char *text = g_strndup(c->in->str, len);
        g_autoptr(JsonNode) node = parse_json(text);

        g_string_erase(c->in, 0, len);
        o = json_object_ref(json_node_get_object(node));
        *text_out = g_steal_pointer(&text);
    }
    return o;
}

static void test_pretty(void)
{
    QmpServer *s = server_new("pretty", true);
    g_autofree char *path = sock_path("pretty");
    Client *c = client_connect_path(path);
    g_autofree char *g_text = NULL;
    g_autofree char *r_text = NULL;
    g_autoptr(JsonObject) greeting = client_pretty_msg(c, &g_text);
    g_autoptr(JsonObject) reply = NULL;

    g_assert_true(json_object_has_member(greeting, "QMP"));
    g_assert_true(g_str_has_prefix(g_text, "{\n    \"QMP\" : {\n"));
    client_send(c, "{\"execute\": \"qmp_capabilities\", \"id\": 1}");
    reply = client_pretty_msg(c, &r_text);
    assert_return_empty(reply);
    g_assert_nonnull(strstr(r_text, "\n    \"id\" : 1\n"));
    client_free(c);
    qmp_server_free(s);
}

/* ------------------------------------------------------------------------ */
/* Misbehaving clients, nesting, quit                                        */

static void test_backlog_disconnects(void)
{
    QmpServer *s = server_new("backlog", false);
    Client *c = client_new("backlog");
    Client *other = client_new("backlog");
    g_autoptr(JsonObject) r = NULL;
    int64_t deadline;

    client_negotiate(c);
    client_negotiate(other);
    /* 24 replies of 1 MiB that c never reads: over 16 MiB. */
    for (int i = 0; i < 24 && qmp_server_num_clients(s) == 2; i++) {
        client_send(c, "{\"execute\": \"test-big\", \"arguments\": "
                       "{\"size\": 1048576}}");
        aio_poll(ctx, false);
    }
    deadline = clock_now_ns() + REPLY_TIMEOUT_NS;
    while (qmp_server_num_clients(s) != 1) {
        g_assert_cmpint(clock_now_ns(), <, deadline);
        aio_poll(ctx, false);
    }
    /* c sees the end of the stream after what the kernel had taken. */
    client_wait_eof(c);
    g_assert_cmpuint(c->in->len, <, 16u << 20);
    /* The other client is fine. */
    client_send(other, "{\"execute\": \"test-probe\", \"id\": 1}");
    r = expect_return_id(other, 1);
    client_free(c);
    client_free(other);
    qmp_server_free(s);
}

static Client *hook_client;

static void close_hook_client(void)
{
    shutdown(hook_client->fd, SHUT_RDWR);
}

static void test_disconnect_mid_command(void)
{
    QmpServer *s = server_new("midcmd", false);
    Client *c = client_new("midcmd");
    Client *other = client_new("midcmd");
    g_autoptr(JsonObject) r = NULL;

    client_negotiate(c);
    client_negotiate(other);
    /* The client goes away while its command runs a nested loop. */
    hook_client = c;
    nested_hook = close_hook_client;
    client_send(c, "{\"execute\": \"test-nested\", \"arguments\": "
                   "{\"turns\": 20}}{\"execute\": \"test-nested\"}");
    loop_until_clients(s, 1);
    nested_hook = NULL;
    g_assert_false(nested_running);
    qmp_event_emit("TEST_AFTER_GONE", NULL);
    client_send(other, "{\"execute\": \"test-probe\", \"id\": 1}");
    {
        g_autoptr(JsonObject) e = client_msg(other);

        g_assert_cmpstr(json_object_get_string_member(e, "event"), ==,
                        "TEST_AFTER_GONE");
    }
    r = expect_return_id(other, 1);
    client_free(c);
    client_free(other);
    qmp_server_free(s);
}

static Client *probe_client;

/* From inside test-nested: another client's command arrives. */
static void send_probe(void)
{
    client_send(probe_client, "{\"execute\": \"test-probe\", \"id\": 2}");
}

static Client *late_client;

static void connect_late(void)
{
    g_autofree char *path = sock_path("nest");

    late_client = client_connect_path(path);
}

static void test_commands_do_not_nest(void)
{
    QmpServer *s = server_new("nest", false);
    Client *a = client_new("nest");
    Client *b = client_new("nest");
    Client *late;
    g_autoptr(JsonObject) r1 = NULL;
    g_autoptr(JsonObject) r2 = NULL;
    g_autoptr(JsonObject) r3 = NULL;
    g_autoptr(JsonObject) r4 = NULL;

    client_negotiate(a);
    client_negotiate(b);
    nested_violations = 0;
    probe_client = b;
    nested_hook = send_probe;
    /* a's second command is in the same write: it must wait too. */
    client_send(a, "{\"execute\": \"test-nested\", \"arguments\": "
                   "{\"turns\": 30}, \"id\": 1}"
                   "{\"execute\": \"test-probe\", \"id\": 3}");
    r1 = expect_return_id(a, 1);
    nested_hook = NULL;
    r2 = expect_return_id(b, 2);
    r3 = expect_return_id(a, 3);
    g_assert_cmpuint(nested_violations, ==, 0);

    /* A client accepted during a command (it connects from inside it)
     * gets its greeting, and is read once the command is over. */
    nested_hook = connect_late;
    client_send(a, "{\"execute\": \"test-nested\", \"arguments\": "
                   "{\"turns\": 10}, \"id\": 4}");
    r4 = expect_return_id(a, 4);
    nested_hook = NULL;
    g_assert_cmpuint(qmp_server_num_accepted(s), ==, 3);
    late = late_client;
    {
        g_autoptr(JsonObject) greeting = client_msg(late);

        g_assert_true(json_object_has_member(greeting, "QMP"));
    }
    client_negotiate(late);
    g_assert_cmpuint(nested_violations, ==, 0);
    client_free(a);
    client_free(b);
    client_free(late);
    qmp_server_free(s);
}

static unsigned quit_calls;

static void quit_cb(void *opaque)
{
    g_assert_true(opaque == &quit_calls);
    quit_calls++;
}

static void test_quit(void)
{
    QmpServer *s = server_new("quit", false);
    Client *c = client_new("quit");
    g_autoptr(JsonObject) r = NULL;

    client_negotiate(c);
    qmp_set_quit_handler(NULL, NULL);
    client_send(c, "{\"execute\": \"quit\"}");
    r = client_msg(c);
    assert_error(r, "GenericError", NULL);

    quit_calls = 0;
    qmp_set_quit_handler(quit_cb, &quit_calls);
    client_send(c, "{\"execute\": \"quit\", \"arguments\": {\"x\": 1}}");
    expect_error(c, "GenericError", "Parameter 'x' is unexpected");
    g_assert_cmpuint(quit_calls, ==, 0);
    client_send(c, "{\"execute\": \"quit\", \"id\": 1}");
    g_clear_pointer(&r, json_object_unref);
    r = expect_return_id(c, 1);
    assert_return_empty(r);
    /* The hook runs from a bottom half, after the reply went out. */
    for (int i = 0; i < 10 && !quit_calls; i++) {
        aio_poll(ctx, false);
    }
    g_assert_cmpuint(quit_calls, ==, 1);
    qmp_set_quit_handler(NULL, NULL);
    client_free(c);
    qmp_server_free(s);
}

/* ------------------------------------------------------------------------ */
/* Sockets                                                                   */

static void test_socket_file(void)
{
    g_autofree char *path = sock_path("file");
    QmpServerConfig cfg = { .path = path, .listen_fd = -1, .name = "file" };
    Error *err = NULL;
    struct stat st;
    QmpServer *s, *s2;
    int fd;

    /* A regular file is not replaced. */
    g_assert_true(g_file_set_contents(path, "data", -1, NULL));
    g_assert_null(qmp_server_new(&cfg, ctx, &err));
    g_assert_nonnull(err);
    g_assert_nonnull(strstr(error_get_pretty(err), "is not a socket"));
    g_clear_error(&err);
    g_assert_cmpint(unlink(path), ==, 0);

    /* A stale socket file (nobody listens) is. */
    {
        struct sockaddr_un sun = { .sun_family = AF_UNIX };

        strcpy(sun.sun_path, path);
        fd = socket(AF_UNIX, SOCK_STREAM, 0);
        g_assert_cmpint(bind(fd, (struct sockaddr *)&sun, sizeof(sun)), ==,
                        0);
        close(fd);
    }
    s = qmp_server_new(&cfg, ctx, &err);
    g_assert_no_error(err);
    g_assert_cmpint(stat(path, &st), ==, 0);
    g_assert_true(S_ISSOCK(st.st_mode));
    g_assert_cmpint(st.st_mode & 0777, ==, 0600);

    /* A live one is not. */
    s2 = qmp_server_new(&cfg, ctx, &err);
    g_assert_null(s2);
    g_assert_nonnull(strstr(error_get_pretty(err), "in use"));
    g_clear_error(&err);

    qmp_server_free(s);
    g_assert_cmpint(stat(path, &st), <, 0);
    g_assert_cmpint(errno, ==, ENOENT);
}

static void test_inherited_fd(void)
{
    g_autofree char *path = sock_path("inherited");
    struct sockaddr_un sun = { .sun_family = AF_UNIX };
    QmpServerConfig cfg = { .path = NULL, .name = "inherited" };
    Error *err = NULL;
    QmpServer *s;
    Client *c;
    int fd, sv[2];

    /* Not a listening socket: refused, the fd stays the caller's. */
    g_assert_cmpint(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), ==, 0);
    cfg.listen_fd = sv[0];
    g_assert_null(qmp_server_new(&cfg, ctx, &err));
    g_assert_nonnull(strstr(error_get_pretty(err), "not a listening"));
    g_clear_error(&err);
    g_assert_cmpint(fcntl(sv[0], F_GETFD), >=, 0);
    close(sv[0]);
    close(sv[1]);

    strcpy(sun.sun_path, path);
    fd = socket(AF_UNIX, SOCK_STREAM, 0);
    g_assert_cmpint(bind(fd, (struct sockaddr *)&sun, sizeof(sun)), ==, 0);
    g_assert_cmpint(listen(fd, 4), ==, 0);
    cfg.listen_fd = fd;
    s = qmp_server_new(&cfg, ctx, &err);
    g_assert_no_error(err);
    c = client_new("inherited");
    client_negotiate(c);
    client_free(c);
    qmp_server_free(s);
    /* The server did not create the file, so it leaves it. */
    g_assert_cmpint(access(path, F_OK), ==, 0);
    g_assert_cmpint(unlink(path), ==, 0);
}

/* Reads everything until EOF in another thread. */
static gpointer drain_thread(gpointer opaque)
{
    int fd = GPOINTER_TO_INT(opaque);
    GString *all = g_string_new(NULL);
    char buf[65536];
    ssize_t n;

    while ((n = recv(fd, buf, sizeof(buf), 0)) > 0) {
        g_string_append_len(all, buf, n);
    }
    return all;
}

static void test_free_flushes_output(void)
{
    QmpServer *s = server_new("flush", false);
    Client *c = client_new("flush");
    g_autoptr(JsonObject) r = NULL;
    GString *all;
    GThread *t;
    char *nl;

    client_negotiate(c);
    /* Far more than the socket buffers hold, not read yet. */
    client_send(c, "{\"execute\": \"test-big\", \"arguments\": "
                   "{\"size\": 4194304}, \"id\": 1}");
    for (int i = 0; i < 5; i++) {
        aio_poll(ctx, false);
    }
    t = g_thread_new("drain", drain_thread, GINT_TO_POINTER(c->fd));
    qmp_server_free(s);
    all = g_thread_join(t);
    nl = memchr(all->str, '\n', all->len);
    g_assert_nonnull(nl);
    g_assert_cmpuint(nl - all->str + 1, ==, all->len);
    {
        g_autoptr(JsonNode) node = parse_json(all->str);
        JsonObject *o = json_node_get_object(node);

        g_assert_cmpint(json_object_get_int_member(o, "id"), ==, 1);
        g_assert_cmpuint(strlen(json_object_get_string_member(
            json_object_get_object_member(o, "return"), "s")), ==, 4194304);
    }
    g_string_free(all, TRUE);
    client_free(c);
}

/* ------------------------------------------------------------------------ */

static const TestCase tests[] = {
    { "/qmp/server/greeting-and-counts", test_greeting_and_counts },
    { "/qmp/server/negotiation", test_negotiation },
    { "/qmp/server/request-checks", test_request_checks },
    { "/qmp/framing/byte-by-byte", test_framing_byte_by_byte },
    { "/qmp/framing/several-in-one-write", test_framing_several_in_one_write },
    { "/qmp/framing/strings", test_framing_strings },
    { "/qmp/framing/too-large", NULL, test_framing, &too_large },
    { "/qmp/framing/too-deep", NULL, test_framing, &too_deep },
    { "/qmp/framing/garbage", test_framing_garbage },
    { "/qmp/framing/random", test_framing_random },
    { "/qmp/dispatch/table-and-classes", test_dispatch },
    { "/qmp/dispatch/classes-on-the-wire", test_error_classes_on_the_wire },
    { "/qmp/dispatch/args", test_args },
    { "/qmp/server/events", test_events },
    { "/qmp/server/pretty", test_pretty },
    { "/qmp/server/backlog-disconnects", test_backlog_disconnects },
    { "/qmp/server/disconnect-mid-command", test_disconnect_mid_command },
    { "/qmp/server/commands-do-not-nest", test_commands_do_not_nest },
    { "/qmp/server/quit", test_quit },
    { "/qmp/server/socket-file", test_socket_file },
    { "/qmp/server/inherited-fd", test_inherited_fd },
    { "/qmp/server/free-flushes-output", test_free_flushes_output },
};

static void setup(void)
{
    tmp_dir = g_dir_make_tmp("test-qmp-XXXXXX", NULL);
    g_assert_nonnull(tmp_dir);
    ctx = ctx_new();
    main_loop_set_context(ctx);
    qmp_register_core_commands();
    qmp_register_command("test-echo", cmd_echo);
    qmp_register_command("test-big", cmd_big);
    qmp_register_command("test-fail", cmd_fail);
    qmp_register_command("test-nested", cmd_nested);
    qmp_register_command("test-probe", cmd_probe);
}

static void teardown(void)
{
    main_loop_set_context(NULL);
    aio_context_unref(ctx);
    g_rmdir(tmp_dir);
    g_free(tmp_dir);
}

/* Below the 60 s meson timeout, so that the watchdog reports first. */
TEST_MAIN_SETUP(tests, 50, setup, teardown)
