/*
 * Unit tests for the small utilities: strict integer/bool parsing
 * (util/cutils.h), key=value option strings (util/keyval.h), Error
 * helpers (util/error.h), event notifiers (util/event-notifier.h),
 * iovec copies (util/iov.h) and listening UNIX sockets
 * (util/unix-socket.h).
 *
 * Every test works on values it builds itself (sockets in a temporary
 * directory of its own); nothing depends on timing.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <glib.h>
#include <glib/gstdio.h>

#include "util/cutils.h"
#include "util/error.h"
#include "util/event-notifier.h"
#include "util/iov.h"
#include "util/keyval.h"
#include "util/unix-socket.h"
#include "test-helpers.h"
#include "util-test-helpers.h"

/* ------------------------------------------------------------------------ */
/* Helpers                                                                   */

/* parse_int64_in_range() that must succeed; returns the value. */
static int64_t parse_ok(const char *str, int64_t min, int64_t max)
{
    Error *err = NULL;
    int64_t v = 0x5a5a;

    if (!parse_int64_in_range("opt", str, min, max, &v, &err)) {
        g_test_message("parse_int64_in_range(\"%s\") failed: %s", str,
                       err ? error_get_pretty(err) : "(no error set)");
        g_assert_not_reached();
    }
    g_assert_null(err);
    return v;
}

/* parse_int64_in_range() that must fail, leave *out alone and name "opt". */
static void parse_bad(const char *str, int64_t min, int64_t max)
{
    Error *err = NULL;
    int64_t v = 0x5a5a;

    if (parse_int64_in_range("my-opt", str, min, max, &v, &err)) {
        g_test_message("parse_int64_in_range(\"%s\", %" PRId64 ", %" PRId64
                       ") accepted it as %" PRId64, str, min, max, v);
        g_assert_not_reached();
    }
    assert_error_mentions(err, "my-opt", NULL);
    g_assert_cmpint(v, ==, 0x5a5a);
    error_free(err);

    /* A NULL errp is allowed and must not crash. */
    g_assert_false(parse_int64_in_range("my-opt", str, min, max, &v, NULL));
}

/* parse_bad() of each string up to the NULL, all with min and max. */
static void parse_bad_each(int64_t min, int64_t max, ...)
{
    va_list ap;
    const char *str;

    va_start(ap, max);
    while ((str = va_arg(ap, const char *))) {
        parse_bad(str, min, max);
    }
    va_end(ap);
}

/* ------------------------------------------------------------------------ */
/* parse_int64_in_range                                                      */

static void test_parse_int_good(void)
{
    g_assert_cmpint(parse_ok("0", 0, 10), ==, 0);
    g_assert_cmpint(parse_ok("10", 0, 10), ==, 10);
    g_assert_cmpint(parse_ok("7", 0, 10), ==, 7);
    g_assert_cmpint(parse_ok("-5", -10, 10), ==, -5);
    g_assert_cmpint(parse_ok("32768", 0, INT64_MAX), ==, 32768);
    g_assert_cmpint(parse_ok("9223372036854775807", 0, INT64_MAX), ==,
                    INT64_MAX);
    g_assert_cmpint(parse_ok("-9223372036854775808", INT64_MIN, INT64_MAX),
                    ==, INT64_MIN);
    /* Leading zeros are still decimal. */
    g_assert_cmpint(parse_ok("010", 0, 100), ==, 10);
}

static void test_parse_int_hex(void)
{
    g_assert_cmpint(parse_ok("0x10", 0, 100), ==, 16);
    g_assert_cmpint(parse_ok("0x1f", 0, 100), ==, 31);
    g_assert_cmpint(parse_ok("0x7fffffffffffffff", 0, INT64_MAX), ==,
                    INT64_MAX);
    parse_bad_each(0, 100, "0x", "0xg", "0x65" /* 101: out of range */,
                   NULL);
}

static void test_parse_int_junk(void)
{
    parse_bad_each(0, 100, "abc", "12abc", "1 2", "5 ", "1.5", "+", NULL);
    parse_bad_each(-100, 100, "--1", "-", NULL);
    parse_bad("1e3", 0, 100000);
}

static void test_parse_int_leading_space(void)
{
    /* Refused like trailing blanks ("5 "), whatever strtoll would skip. */
    parse_bad_each(0, 100, " 5", "  5", "\t5", "\n5", " 0x10", " ", NULL);
    parse_bad(" -5", -100, 100);
    g_assert_cmpint(parse_ok("5", 0, 100), ==, 5);
}

static void test_parse_int_empty(void)
{
    parse_bad("", 0, 100);
}

static void test_parse_int_overflow(void)
{
    parse_bad_each(0, INT64_MAX, "99999999999999999999", "9223372036854775808",
                   "0x10000000000000000", NULL);
    parse_bad_each(INT64_MIN, INT64_MAX, "-9223372036854775809",
                   "-99999999999999999999", NULL);
}

static void test_parse_int_range(void)
{
    Error *err = NULL;
    int64_t v = 0;

    parse_bad("11", 5, 10);
    parse_bad("4", 5, 10);
    parse_bad("-1", 0, INT64_MAX);

    /* The message says what would have been accepted. */
    g_assert_false(parse_int64_in_range("poll-grow", "77", 5, 10, &v, &err));
    assert_error_mentions(err, "poll-grow", "10");
    assert_error_mentions(err, "5", NULL);
    error_free(err);
}

/* ------------------------------------------------------------------------ */
/* parse_bool                                                                */

static void test_parse_bool(void)
{
    static const char *const bad[] = {
        "", "maybe", "1x", "onn", "of", "yess", " on", "on ",
    };
    Error *err = NULL;
    bool b;

    for (size_t i = 0; i < G_N_ELEMENTS(bool_spellings); i++) {
        b = !bool_spellings[i].value;
        g_assert_true(parse_bool("direct", bool_spellings[i].text, &b, &err));
        g_assert_null(err);
        g_assert_cmpint(b, ==, bool_spellings[i].value);
    }
    for (size_t i = 0; i < G_N_ELEMENTS(bad); i++) {
        b = true;
        if (parse_bool("cache.direct", bad[i], &b, &err)) {
            g_test_message("parse_bool accepted \"%s\"", bad[i]);
            g_assert_not_reached();
        }
        assert_error_mentions(err, "cache.direct", NULL);
        g_clear_error(&err);
        g_assert_false(parse_bool("cache.direct", bad[i], &b, NULL));
    }
}

/* ------------------------------------------------------------------------ */
/* keyval                                                                    */

static const KeyvalPair *pair_at(GPtrArray *opts, guint i)
{
    g_assert_cmpuint(i, <, opts->len);
    return g_ptr_array_index(opts, i);
}

static void assert_pair(GPtrArray *opts, guint i, const char *key,
                        const char *value)
{
    const KeyvalPair *p = pair_at(opts, i);

    g_assert_cmpstr(p->key, ==, key);
    g_assert_cmpstr(p->value, ==, value);
}

/* keyval_parse() that must succeed, with n pairs (n < 0: any number). */
static GPtrArray *parse_kv_ok(const char *str, const char *implied, int n)
{
    Error *err = NULL;
    GPtrArray *opts = keyval_parse(str, implied, &err);

    g_assert_null(err);
    g_assert_nonnull(opts);
    if (n >= 0) {
        g_assert_cmpuint(opts->len, ==, n);
    }
    return opts;
}

static void test_keyval_simple(void)
{
    GPtrArray *opts = parse_kv_ok("a=1,b=2", NULL, 2);

    assert_pair(opts, 0, "a", "1");
    assert_pair(opts, 1, "b", "2");
    g_assert_cmpstr(keyval_lookup(opts, "a"), ==, "1");
    g_assert_cmpstr(keyval_lookup(opts, "b"), ==, "2");
    g_assert_null(keyval_lookup(opts, "c"));
    g_assert_null(keyval_lookup(opts, "A"));
    g_ptr_array_unref(opts);

    /* One pair, order kept with several. */
    opts = parse_kv_ok("z=9,y=8,x=7", NULL, 3);
    assert_pair(opts, 0, "z", "9");
    assert_pair(opts, 1, "y", "8");
    assert_pair(opts, 2, "x", "7");
    g_ptr_array_unref(opts);

    /* Dotted keys are ordinary keys. */
    opts = parse_kv_ok("cache.direct=on,addr.type=unix", NULL, -1);
    g_assert_cmpstr(keyval_lookup(opts, "cache.direct"), ==, "on");
    g_assert_cmpstr(keyval_lookup(opts, "addr.type"), ==, "unix");
    g_ptr_array_unref(opts);
}

static void test_keyval_implied(void)
{
    Error *err = NULL;
    GPtrArray *opts;

    opts = parse_kv_ok("iothread,id=x", "qom-type", 2);
    assert_pair(opts, 0, "qom-type", "iothread");
    assert_pair(opts, 1, "id", "x");
    g_assert_cmpstr(keyval_lookup(opts, "qom-type"), ==, "iothread");
    g_ptr_array_unref(opts);

    /* The implied key may also be given explicitly. */
    opts = parse_kv_ok("qom-type=iothread,id=x", "qom-type", -1);
    g_assert_cmpstr(keyval_lookup(opts, "qom-type"), ==, "iothread");
    g_assert_cmpstr(keyval_lookup(opts, "id"), ==, "x");
    g_ptr_array_unref(opts);

    /* Without an implied key, an element without '=' is an error. */
    opts = keyval_parse("iothread,id=x", NULL, &err);
    g_assert_null(opts);
    g_assert_nonnull(err);
    g_clear_error(&err);
}

static void test_keyval_escape(void)
{
    GPtrArray *opts;

    opts = parse_kv_ok("a=x,,y", NULL, 1);
    assert_pair(opts, 0, "a", "x,y");
    g_ptr_array_unref(opts);

    opts = parse_kv_ok("cpu-affinity=0-3,,8,b=2", NULL, 2);
    assert_pair(opts, 0, "cpu-affinity", "0-3,8");
    assert_pair(opts, 1, "b", "2");
    g_ptr_array_unref(opts);

    /* ",,,," is two literal commas. */
    opts = parse_kv_ok("a=,,,,", NULL, -1);
    assert_pair(opts, 0, "a", ",,");
    g_ptr_array_unref(opts);
}

static void test_keyval_errors(void)
{
    static const char *const bad[] = {
        "a=1,a=2",          /* duplicate */
        "a=1,b=2,a=3",      /* duplicate, not adjacent */
        "=1",               /* empty key */
        "a=1,=2",           /* empty key later */
    };
    Error *err = NULL;

    for (size_t i = 0; i < G_N_ELEMENTS(bad); i++) {
        GPtrArray *opts = keyval_parse(bad[i], NULL, &err);

        if (opts) {
            g_test_message("keyval_parse accepted \"%s\"", bad[i]);
            g_assert_not_reached();
        }
        g_assert_nonnull(err);
        g_clear_error(&err);
        /* NULL errp: still fails, nothing leaks. */
        g_assert_null(keyval_parse(bad[i], NULL, NULL));
    }

    /* A duplicate error names the key. */
    g_assert_null(keyval_parse("poll-max-ns=1,poll-max-ns=2", NULL, &err));
    assert_error_mentions(err, "poll-max-ns", NULL);
    g_clear_error(&err);

    /* The implied key given twice (implicitly and explicitly). */
    g_assert_null(keyval_parse("iothread,qom-type=iothread", "qom-type",
                               &err));
    g_assert_nonnull(err);
    g_clear_error(&err);
}

/* ------------------------------------------------------------------------ */
/* Error                                                                     */

static void test_error_setg(void)
{
    Error *err = NULL;

    error_setg(&err, "bad value %d for '%s'", 42, "poll-grow");
    g_assert_nonnull(err);
    g_assert_cmpstr(error_get_pretty(err), ==, "bad value 42 for 'poll-grow'");
    g_assert_true(err->domain == SPINDLE_ERROR);
    error_free(err);

    /* errp == NULL: ignored. */
    error_setg(NULL, "dropped %s", "message");
}

static void test_error_setg_errno(void)
{
    Error *err = NULL;
    char *expected = g_strdup_printf("cannot open 'x': %s", strerror(ENOENT));

    error_setg_errno(&err, ENOENT, "cannot open '%s'", "x");
    g_assert_nonnull(err);
    g_assert_cmpstr(error_get_pretty(err), ==, expected);
    error_free(err);
    g_free(expected);
}

static void test_error_prepend(void)
{
    Error *err = NULL;

    /* Nothing to prepend to: stays NULL, no crash. */
    error_prepend(&err, "ctx %d: ", 1);
    g_assert_null(err);
    error_prepend(NULL, "ctx: ");

    error_setg(&err, "value too large");
    error_prepend(&err, "iothread '%s': ", "iot0");
    g_assert_cmpstr(error_get_pretty(err), ==, "iothread 'iot0': value too large");
    error_prepend(&err, "--object: ");
    g_assert_cmpstr(error_get_pretty(err), ==,
                    "--object: iothread 'iot0': value too large");
    error_free(err);
}

static void test_error_propagate(void)
{
    Error *dst = NULL;
    Error *local = NULL;

    error_setg(&local, "local failure");
    error_propagate(&dst, local);
    g_assert_true(dst == local);
    g_assert_cmpstr(error_get_pretty(dst), ==, "local failure");
    error_free(dst);

    /* A NULL destination frees the error (checked by the leak sanitizer). */
    local = NULL;
    error_setg(&local, "nobody wants this");
    error_propagate(NULL, local);
    local = NULL;

    /* g_clear_error() works on it: Error is a GError. */
    error_setg(&local, "cleared");
    g_clear_error(&local);
    g_assert_null(local);
}

static void test_error_report(void)
{
    if (g_test_subprocess()) {
        Error *err = NULL;

        error_setg(&err, "disk %s is missing", "vm1.img");
        error_report_err(err);
        error_report("plain %d", 7);
        return;
    }
    g_test_trap_subprocess(NULL, 0, 0);
    g_test_trap_assert_passed();
    g_test_trap_assert_stderr("*spindle: disk vm1.img is missing*");
    g_test_trap_assert_stderr("*spindle: plain 7*");
}

/* ------------------------------------------------------------------------ */
/* EventNotifier                                                             */

static void test_event_notifier_basic(void)
{
    EventNotifier e;
    int fl;

    g_assert_cmpint(event_notifier_init(&e, false), ==, 0);
    g_assert_cmpint(event_notifier_get_fd(&e), >=, 0);
    fl = fcntl(e.fd, F_GETFL);
    g_assert_cmpint(fl, !=, -1);
    g_assert_true(fl & O_NONBLOCK);
    fl = fcntl(e.fd, F_GETFD);
    g_assert_true(fl & FD_CLOEXEC);

    g_assert_false(event_notifier_test_and_clear(&e));
    g_assert_cmpint(event_notifier_set(&e), ==, 0);
    g_assert_true(event_notifier_test_and_clear(&e));
    g_assert_false(event_notifier_test_and_clear(&e));

    /* Several sets before a clear: one signal. */
    for (int i = 0; i < 5; i++) {
        g_assert_cmpint(event_notifier_set(&e), ==, 0);
    }
    g_assert_true(event_notifier_test_and_clear(&e));
    g_assert_false(event_notifier_test_and_clear(&e));

    event_notifier_cleanup(&e);
}

static void test_event_notifier_active(void)
{
    EventNotifier e;

    g_assert_cmpint(event_notifier_init(&e, true), ==, 0);
    g_assert_true(event_notifier_test_and_clear(&e));
    g_assert_false(event_notifier_test_and_clear(&e));
    event_notifier_cleanup(&e);
}

static void test_event_notifier_fd(void)
{
    EventNotifier e;
    uint64_t one = 1;
    int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);

    g_assert_cmpint(fd, >=, 0);
    event_notifier_init_fd(&e, fd);
    g_assert_cmpint(event_notifier_get_fd(&e), ==, fd);
    g_assert_false(event_notifier_test_and_clear(&e));

    /* A write by "the other side" is seen. */
    g_assert_cmpint(write(fd, &one, sizeof(one)), ==, sizeof(one));
    g_assert_true(event_notifier_test_and_clear(&e));
    g_assert_false(event_notifier_test_and_clear(&e));

    /* And a set is visible to a reader of the raw fd. */
    g_assert_cmpint(event_notifier_set(&e), ==, 0);
    {
        uint64_t v = 0;
        g_assert_cmpint(read(fd, &v, sizeof(v)), ==, sizeof(v));
        g_assert_cmpuint(v, >=, 1);
    }
    /*
     * Who closes a wrapped fd is not part of the contract: clean up, then
     * close it ourselves (EBADF if the notifier already did).
     */
    event_notifier_cleanup(&e);
    close(fd);
}

static void test_event_notifier_cleanup_unset(void)
{
    EventNotifier e = { .fd = -1 };

    event_notifier_cleanup(&e);     /* must be harmless */
}

/* ------------------------------------------------------------------------ */
/* iovec copies                                                              */

/*
 * "abc" + "" (NULL base) + "defgh" + "ij": ten bytes over four entries, one
 * of them empty, as a virtqueue element may have.
 */
typedef struct IovFixture {
    char a[3], b[5], c[2];
    struct iovec iov[4];
} IovFixture;

static void iov_fixture_init(IovFixture *f)
{
    memcpy(f->a, "abc", 3);
    memcpy(f->b, "defgh", 5);
    memcpy(f->c, "ij", 2);
    f->iov[0] = (struct iovec) { f->a, 3 };
    f->iov[1] = (struct iovec) { NULL, 0 };
    f->iov[2] = (struct iovec) { f->b, 5 };
    f->iov[3] = (struct iovec) { f->c, 2 };
}

static void test_iov_size(void)
{
    IovFixture f;

    iov_fixture_init(&f);
    g_assert_cmpuint(iov_size(f.iov, 4), ==, 10);
    g_assert_cmpuint(iov_size(f.iov, 2), ==, 3);
    g_assert_cmpuint(iov_size(f.iov, 0), ==, 0);
}

static void test_iov_to_buf(void)
{
    IovFixture f;
    char buf[16];

    iov_fixture_init(&f);
    memset(buf, 0, sizeof(buf));
    g_assert_cmpuint(iov_to_buf(f.iov, 4, 0, buf, sizeof(buf)), ==, 10);
    g_assert_cmpstr(buf, ==, "abcdefghij");

    /* From inside an entry, across the empty one. */
    memset(buf, 0, sizeof(buf));
    g_assert_cmpuint(iov_to_buf(f.iov, 4, 2, buf, 4), ==, 4);
    g_assert_cmpstr(buf, ==, "cdef");

    /* From an entry boundary, to the end. */
    memset(buf, 0, sizeof(buf));
    g_assert_cmpuint(iov_to_buf(f.iov, 4, 8, buf, 5), ==, 2);
    g_assert_cmpstr(buf, ==, "ij");

    /* At or past the end; nothing asked. */
    g_assert_cmpuint(iov_to_buf(f.iov, 4, 10, buf, 1), ==, 0);
    g_assert_cmpuint(iov_to_buf(f.iov, 4, 99, buf, 1), ==, 0);
    g_assert_cmpuint(iov_to_buf(f.iov, 4, 0, buf, 0), ==, 0);
}

static void test_iov_from_buf(void)
{
    IovFixture f;

    iov_fixture_init(&f);
    g_assert_cmpuint(iov_from_buf(f.iov, 4, 0, "ABCDEFGHIJKL", 12), ==, 10);
    g_assert_cmpmem(f.a, 3, "ABC", 3);
    g_assert_cmpmem(f.b, 5, "DEFGH", 5);
    g_assert_cmpmem(f.c, 2, "IJ", 2);

    /* Only the bytes asked for change. */
    iov_fixture_init(&f);
    g_assert_cmpuint(iov_from_buf(f.iov, 4, 2, "XYZ", 3), ==, 3);
    g_assert_cmpmem(f.a, 3, "abX", 3);
    g_assert_cmpmem(f.b, 5, "YZfgh", 5);
    g_assert_cmpmem(f.c, 2, "ij", 2);

    g_assert_cmpuint(iov_from_buf(f.iov, 4, 9, "QR", 2), ==, 1);
    g_assert_cmpmem(f.c, 2, "iQ", 2);
    g_assert_cmpuint(iov_from_buf(f.iov, 4, 10, "Q", 1), ==, 0);
}

static void test_iov_zero_from(void)
{
    IovFixture f;

    /* From the middle of an entry on, over the empty one (NULL base). */
    iov_fixture_init(&f);
    iov_zero_from(f.iov, 4, 2);
    g_assert_cmpmem(f.a, 3, "ab\0", 3);
    g_assert_cmpmem(f.b, 5, "\0\0\0\0\0", 5);
    g_assert_cmpmem(f.c, 2, "\0\0", 2);

    /* From an entry's start; at or past the end: nothing. */
    iov_fixture_init(&f);
    iov_zero_from(f.iov, 4, 8);
    g_assert_cmpmem(f.b, 5, "defgh", 5);
    g_assert_cmpmem(f.c, 2, "\0\0", 2);
    iov_fixture_init(&f);
    iov_zero_from(f.iov, 4, 10);
    iov_zero_from(f.iov, 4, 99);
    g_assert_cmpmem(f.c, 2, "ij", 2);
}

/* ------------------------------------------------------------------------ */
/* Listening UNIX sockets                                                    */

/* A connected client socket on path, or -errno. */
static int unix_connect(const char *path)
{
    struct sockaddr_un sun = { .sun_family = AF_UNIX };
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int err;

    g_assert_cmpint(fd, >=, 0);
    g_assert_cmpuint(strlen(path), <, sizeof(sun.sun_path));
    memcpy(sun.sun_path, path, strlen(path) + 1);
    if (connect(fd, (struct sockaddr *)&sun, sizeof(sun)) < 0) {
        err = errno;
        close(fd);
        return -err;
    }
    return fd;
}

/* A client connects to path and listen_fd accepts it; both are closed. */
static void assert_connects(const char *path, int listen_fd)
{
    int c = unix_connect(path);
    int a;

    g_assert_cmpint(c, >=, 0);
    a = accept(listen_fd, NULL, NULL);
    g_assert_cmpint(a, >=, 0);
    close(a);
    close(c);
}

/* Leave a socket file at path that nobody listens on (a dead server's). */
static void make_stale_socket(const char *path)
{
    struct sockaddr_un sun = { .sun_family = AF_UNIX };
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

    g_assert_cmpint(fd, >=, 0);
    memcpy(sun.sun_path, path, strlen(path) + 1);
    g_assert_cmpint(bind(fd, (struct sockaddr *)&sun, sizeof(sun)), ==, 0);
    close(fd);
}

static void assert_fd_flags(int fd, bool nonblock, bool cloexec)
{
    int fl = fcntl(fd, F_GETFL);
    int fdfl = fcntl(fd, F_GETFD);

    g_assert_cmpint(fl, >=, 0);
    g_assert_cmpint(fdfl, >=, 0);
    g_assert_cmpint(!!(fl & O_NONBLOCK), ==, nonblock);
    g_assert_cmpint(!!(fdfl & FD_CLOEXEC), ==, cloexec);
}

/* Fail the test with err's message if err is set. */
static void assert_no_error(Error *err, const char *what)
{
    if (err) {
        g_test_message("%s failed: %s", what, error_get_pretty(err));
        g_assert_not_reached();
    }
}

/* unix_socket_listen_path() that must succeed. */
static int listen_ok(const char *path, struct stat *st)
{
    Error *err = NULL;
    int fd = unix_socket_listen_path(path, "test", st, &err);

    assert_no_error(err, "unix_socket_listen_path");
    g_assert_cmpint(fd, >=, 0);
    return fd;
}

/* unix_socket_adopt_listen_fd() that must succeed. */
static int adopt_ok(int fd, bool duplicate)
{
    Error *err = NULL;
    int r = unix_socket_adopt_listen_fd(fd, duplicate, &err);

    assert_no_error(err, "unix_socket_adopt_listen_fd");
    g_assert_cmpint(r, >=, 0);
    return r;
}

/* Assert that err's message is exactly want (then free both). */
static void assert_error_is(Error *err, char *want)
{
    g_assert_nonnull(err);
    g_assert_cmpstr(error_get_pretty(err), ==, want);
    error_free(err);
    g_free(want);
}

/* unix_socket_adopt_listen_fd() must refuse fd, not being a listener. */
static void adopt_refused(int fd, bool duplicate)
{
    Error *err = NULL;

    g_assert_cmpint(unix_socket_adopt_listen_fd(fd, duplicate, &err), ==, -1);
    assert_error_is(err, g_strdup_printf("File descriptor %d is not a "
                                         "listening UNIX stream socket", fd));
}

static void test_unix_socket_listen(void)
{
    g_autofree char *dir = g_dir_make_tmp("test-util-XXXXXX", NULL);
    g_autofree char *path = g_build_filename(dir, "s.sock", NULL);
    struct stat st, now;
    int fd;

    g_assert_nonnull(dir);
    fd = listen_ok(path, &st);
    g_assert_cmpint(fd, >=, 0);
    assert_fd_flags(fd, true, true);
    g_assert_cmpint(stat(path, &now), ==, 0);
    g_assert_true(S_ISSOCK(now.st_mode));
    g_assert_cmpint(now.st_mode & 07777, ==, 0600);
    g_assert_true(now.st_dev == st.st_dev && now.st_ino == st.st_ino);

    /* It listens: a client connects and the connection is there. */
    g_assert_cmpint(accept(fd, NULL, NULL), ==, -1);   /* nobody yet */
    g_assert_cmpint(errno, ==, EAGAIN);
    assert_connects(path, fd);

    close(fd);
    unix_socket_unlink_if_same(path, st.st_dev, st.st_ino);
    g_assert_false(g_file_test(path, G_FILE_TEST_EXISTS));
    g_assert_cmpint(g_rmdir(dir), ==, 0);
}

static void test_unix_socket_stale_replaced(void)
{
    g_autofree char *dir = g_dir_make_tmp("test-util-XXXXXX", NULL);
    g_autofree char *path = g_build_filename(dir, "s.sock", NULL);
    struct stat st;
    int fd, c;

    make_stale_socket(path);
    g_assert_true(g_file_test(path, G_FILE_TEST_EXISTS));
    g_assert_cmpint(unix_connect(path), ==, -ECONNREFUSED);

    fd = listen_ok(path, &st);
    g_assert_cmpint(fd, >=, 0);
    /* A new socket: it accepts where the old one refused. */
    c = unix_connect(path);
    g_assert_cmpint(c, >=, 0);
    close(c);
    close(fd);
    unix_socket_unlink_if_same(path, st.st_dev, st.st_ino);
    g_assert_cmpint(g_rmdir(dir), ==, 0);
}

static void test_unix_socket_refused(void)
{
    g_autofree char *dir = g_dir_make_tmp("test-util-XXXXXX", NULL);
    g_autofree char *path = g_build_filename(dir, "s.sock", NULL);
    g_autofree char *file = g_build_filename(dir, "file", NULL);
    g_autofree char *longp = g_strnfill(sizeof(((struct sockaddr_un *)0)->
                                                sun_path), 'x');
    Error *err = NULL;
    struct stat st, st2;
    int fd, c;

    /* A live server's socket is neither taken over nor removed. */
    fd = listen_ok(path, &st);
    g_assert_cmpint(fd, >=, 0);
    g_assert_cmpint(unix_socket_listen_path(path, "Foo", &st2, &err), ==, -1);
    assert_error_is(err, g_strdup_printf("Foo socket path '%s' is in use by "
                                         "another server", path));
    err = NULL;
    c = unix_connect(path);
    g_assert_cmpint(c, >=, 0);
    close(c);

    /* Neither is anything that is not a socket. */
    g_assert_true(g_file_set_contents(file, "keep", -1, NULL));
    g_assert_cmpint(unix_socket_listen_path(file, "Foo", &st2, &err), ==, -1);
    assert_error_is(err, g_strdup_printf("Foo socket path '%s' exists and is "
                                         "not a socket", file));
    err = NULL;
    g_assert_true(g_file_test(file, G_FILE_TEST_IS_REGULAR));

    /* Paths that do not fit a sockaddr_un. */
    g_assert_cmpint(unix_socket_listen_path("", "Foo", &st2, &err), ==, -1);
    assert_error_is(err, g_strdup_printf("Foo socket path '' is empty or "
                                         "longer than %zu bytes",
                                         strlen(longp) - 1));
    err = NULL;
    g_assert_cmpint(unix_socket_listen_path(longp, "Foo", &st2, &err), ==,
                    -1);
    assert_error_is(err, g_strdup_printf("Foo socket path '%s' is empty or "
                                         "longer than %zu bytes", longp,
                                         strlen(longp) - 1));
    err = NULL;

    close(fd);
    unix_socket_unlink_if_same(path, st.st_dev, st.st_ino);
    g_assert_cmpint(g_unlink(file), ==, 0);
    g_assert_cmpint(g_rmdir(dir), ==, 0);
}

static void test_unix_socket_unlink_only_ours(void)
{
    g_autofree char *dir = g_dir_make_tmp("test-util-XXXXXX", NULL);
    g_autofree char *path = g_build_filename(dir, "s.sock", NULL);
    g_autofree char *other = g_build_filename(dir, "other", NULL);
    struct stat st;
    int fd;

    fd = listen_ok(path, &st);
    g_assert_cmpint(fd, >=, 0);
    close(fd);
    /*
     * Someone else's file took the path meanwhile: it stays.  (It is made
     * while ours still exists, so that it cannot get our inode number.)
     */
    g_assert_true(g_file_set_contents(other, "theirs", -1, NULL));
    g_assert_cmpint(g_rename(other, path), ==, 0);
    unix_socket_unlink_if_same(path, st.st_dev, st.st_ino);
    g_assert_true(g_file_test(path, G_FILE_TEST_IS_REGULAR));
    g_assert_cmpint(g_unlink(path), ==, 0);
    /* No file and no path at all are fine too. */
    unix_socket_unlink_if_same(path, st.st_dev, st.st_ino);
    unix_socket_unlink_if_same(NULL, st.st_dev, st.st_ino);
    g_assert_cmpint(g_rmdir(dir), ==, 0);
}

static void test_unix_socket_adopt(void)
{
    g_autofree char *dir = g_dir_make_tmp("test-util-XXXXXX", NULL);
    g_autofree char *path = g_build_filename(dir, "s.sock", NULL);
    struct stat st;
    int pair[2], pipefd[2], lfd, fd;

    /* Not listening, not a socket, not open: refused, fd untouched. */
    g_assert_cmpint(socketpair(AF_UNIX, SOCK_STREAM, 0, pair), ==, 0);
    g_assert_cmpint(pipe(pipefd), ==, 0);
    adopt_refused(pair[0], true);
    adopt_refused(pipefd[0], false);
    assert_fd_flags(pipefd[0], false, false);
    close(pipefd[0]);
    adopt_refused(pipefd[0], true);
    close(pipefd[1]);
    close(pair[0]);
    close(pair[1]);

    /* A blocking, inheritable listening socket, as a parent passes it. */
    lfd = listen_ok(path, &st);
    g_assert_cmpint(lfd, >=, 0);
    g_assert_cmpint(fcntl(lfd, F_SETFL, 0), ==, 0);
    g_assert_cmpint(fcntl(lfd, F_SETFD, 0), ==, 0);

    /* With duplicate: a new close-on-exec fd; the caller's stays open. */
    fd = adopt_ok(lfd, true);
    g_assert_cmpint(fd, >, 2);
    g_assert_cmpint(fd, !=, lfd);
    assert_fd_flags(fd, true, true);
    assert_fd_flags(lfd, true, false);     /* O_NONBLOCK is shared */
    close(fd);
    assert_connects(path, lfd);

    /* Without: fd itself, now non-blocking and close-on-exec. */
    g_assert_cmpint(fcntl(lfd, F_SETFL, 0), ==, 0);
    fd = adopt_ok(lfd, false);
    g_assert_cmpint(fd, ==, lfd);
    assert_fd_flags(lfd, true, true);

    close(lfd);
    unix_socket_unlink_if_same(path, st.st_dev, st.st_ino);
    g_assert_cmpint(g_rmdir(dir), ==, 0);
}

static const TestCase tests[] = {
    { "/util/parse-int/good", test_parse_int_good },
    { "/util/parse-int/hex", test_parse_int_hex },
    { "/util/parse-int/junk", test_parse_int_junk },
    { "/util/parse-int/empty", test_parse_int_empty },
    { "/util/parse-int/leading-space", test_parse_int_leading_space },
    { "/util/parse-int/overflow", test_parse_int_overflow },
    { "/util/parse-int/range", test_parse_int_range },
    { "/util/parse-bool", test_parse_bool },
    { "/util/keyval/simple", test_keyval_simple },
    { "/util/keyval/implied-key", test_keyval_implied },
    { "/util/keyval/comma-escape", test_keyval_escape },
    { "/util/keyval/errors", test_keyval_errors },
    { "/util/error/setg", test_error_setg },
    { "/util/error/setg-errno", test_error_setg_errno },
    { "/util/error/prepend", test_error_prepend },
    { "/util/error/propagate", test_error_propagate },
    { "/util/error/report", test_error_report },
    { "/util/event-notifier/set-test-and-clear", test_event_notifier_basic },
    { "/util/event-notifier/active", test_event_notifier_active },
    { "/util/event-notifier/init-fd", test_event_notifier_fd },
    { "/util/event-notifier/cleanup-unset", test_event_notifier_cleanup_unset },
    { "/util/iov/size", test_iov_size },
    { "/util/iov/to-buf", test_iov_to_buf },
    { "/util/iov/from-buf", test_iov_from_buf },
    { "/util/iov/zero-from", test_iov_zero_from },
    { "/util/unix-socket/listen", test_unix_socket_listen },
    { "/util/unix-socket/stale-replaced", test_unix_socket_stale_replaced },
    { "/util/unix-socket/refused", test_unix_socket_refused },
    { "/util/unix-socket/unlink-only-ours", test_unix_socket_unlink_only_ours },
    { "/util/unix-socket/adopt", test_unix_socket_adopt },
};

/* Below the 30 s meson timeout, so that the watchdog reports first. */
TEST_MAIN(tests, 25)
