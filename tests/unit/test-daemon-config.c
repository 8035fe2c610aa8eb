/*
 * Unit tests for spindle --config (daemon/config.c): which entries a file
 * gives, in which order, as which option text, and the messages of every
 * shape of file it refuses; and the numbers and names that
 * util/listen-fds.c resolves when no socket was passed.
 *
 * Every test parses strings it writes itself; nothing depends on timing.
 */
#include "config-host.h"

#include <string.h>
#include <glib.h>

#include "daemon/config.h"
#include "util/error.h"
#include "util/listen-fds.h"
#include "test-helpers.h"
#include "util-test-helpers.h"

/* Parse text as file "vm.json", asserting that it works. */
static GPtrArray *parse_ok(const char *text)
{
    GPtrArray *out = g_ptr_array_new_with_free_func(daemon_config_entry_free);
    Error *err = NULL;

    if (!daemon_config_parse("vm.json", text, out, &err)) {
        g_test_message("parse failed: %s", error_get_pretty(err));
        g_assert_not_reached();
    }
    return out;
}

/* Parse text, asserting that it fails with a message that starts with
 * prefix and mentions word, and that nothing was added. */
static void parse_bad(const char *text, const char *prefix, const char *word)
{
    g_autoptr(GPtrArray) out =
        g_ptr_array_new_with_free_func(daemon_config_entry_free);
    Error *err = NULL;

    g_assert_false(daemon_config_parse("vm.json", text, out, &err));
    assert_error_mentions(err, word, NULL);
    if (!g_str_has_prefix(error_get_pretty(err), prefix)) {
        g_test_message("\"%s\" does not start with \"%s\"",
                       error_get_pretty(err), prefix);
        g_assert_not_reached();
    }
    g_assert_cmpuint(out->len, ==, 0);
    error_free(err);
}

static const DaemonConfigEntry *entry(GPtrArray *a, guint i)
{
    return g_ptr_array_index(a, i);
}

/* Whatever order the keys come in, object, blockdev, chardev, monitor,
 * export; within a key, the file's. */
static void test_order(void)
{
    g_autoptr(GPtrArray) a = parse_ok(
        "{\"export\": [\"e0\", \"e1\"], \"monitor\": [\"m\"],"
        " \"chardev\": [\"c\"], \"blockdev\": [\"b\"],"
        " \"object\": [\"o\"]}");
    static const char *const keys[] = {
        "object", "blockdev", "chardev", "monitor", "export", "export",
    };
    static const char *const labels[] = {
        "vm.json: object[0]", "vm.json: blockdev[0]", "vm.json: chardev[0]",
        "vm.json: monitor[0]", "vm.json: export[0]", "vm.json: export[1]",
    };

    g_assert_cmpuint(a->len, ==, G_N_ELEMENTS(keys));
    for (guint i = 0; i < a->len; i++) {
        g_assert_cmpstr(entry(a, i)->key, ==, keys[i]);
        g_assert_cmpstr(entry(a, i)->label, ==, labels[i]);
    }
    g_assert_cmpstr(entry(a, 4)->arg, ==, "e0");
    g_assert_cmpstr(entry(a, 5)->arg, ==, "e1");
}

/* An object becomes its JSON text, a string stays as it is. */
static void test_entry_text(void)
{
    g_autoptr(GPtrArray) a = parse_ok(
        "{\"blockdev\": [{\"driver\": \"null-co\", \"node-name\": \"n0\"},"
        " \"driver=null-co,node-name=n1\"]}");

    g_assert_cmpuint(a->len, ==, 2);
    g_assert_cmpstr(entry(a, 0)->arg, ==,
                    "{\"driver\":\"null-co\",\"node-name\":\"n0\"}");
    g_assert_cmpstr(entry(a, 1)->arg, ==, "driver=null-co,node-name=n1");
}

/* An empty file object, and empty arrays, give nothing. */
static void test_empty(void)
{
    g_autoptr(GPtrArray) a = parse_ok("{}");
    g_autoptr(GPtrArray) b = parse_ok("{\"export\": [], \"object\": []}");

    g_assert_cmpuint(a->len, ==, 0);
    g_assert_cmpuint(b->len, ==, 0);
}

static void test_errors(void)
{
    parse_bad("{\"export\": [", "vm.json: invalid JSON", "JSON");
    parse_bad("", "vm.json: ", "JSON");
    parse_bad("[]", "vm.json: expected a JSON object", "object");
    parse_bad("{\"exports\": []}", "vm.json: unknown key 'exports'",
              "export");
    parse_bad("{\"pidfile\": []}", "vm.json: unknown key 'pidfile'",
              "blockdev");
    parse_bad("{\"blockdev\": {}}", "vm.json: key 'blockdev'",
              "got an object");
    parse_bad("{\"export\": \"x\"}", "vm.json: key 'export'", "got a string");
    /* The entry is named by its key and index, after good entries of
     * other keys too (nothing of them is kept). */
    parse_bad("{\"object\": [\"o\"], \"blockdev\": [\"b\", 3]}",
              "vm.json: blockdev[1]: ", "got a number");
    parse_bad("{\"monitor\": [null]}", "vm.json: monitor[0]: ", "got null");
    parse_bad("{\"chardev\": [[\"a\"]]}", "vm.json: chardev[0]: ",
              "got an array");
    parse_bad("{\"export\": [true]}", "vm.json: export[0]: ",
              "got a boolean");
}

static void test_load_missing(void)
{
    g_autoptr(GPtrArray) out =
        g_ptr_array_new_with_free_func(daemon_config_entry_free);
    Error *err = NULL;

    g_assert_false(daemon_config_load("/nonexistent/spindle.json", out,
                                      &err));
    assert_error_mentions(err, "/nonexistent/spindle.json", "cannot read");
    error_free(err);
}

/* Numbers are fds, as before names existed; no socket was passed here,
 * so every name is refused. */
static void test_listen_fds_numbers_and_names(void)
{
    Error *err = NULL;
    bool borrowed = true;

    g_assert_true(listen_fds_init(&err));
    g_assert_cmpint(listen_fds_lookup("addr.str", "7", &borrowed, &err), ==,
                    7);
    g_assert_false(borrowed);
    g_assert_cmpint(listen_fds_lookup("fd", "99999999999", &borrowed, &err),
                    ==, -1);
    assert_error_mentions(err, "'fd'", "out of range");
    g_clear_error(&err);
    g_assert_cmpint(listen_fds_lookup("addr.str", "vhost", &borrowed, &err),
                    ==, -1);
    assert_error_mentions(err, "'addr.str'", "'vhost'");
#ifdef CONFIG_LIBSYSTEMD
    assert_error_mentions(err, "passed no sockets", NULL);
#else
    assert_error_mentions(err, "built without libsystemd", NULL);
#endif
    g_clear_error(&err);
    g_assert_null(listen_fds_describe_unused());
    listen_fds_cleanup();
}

static const TestCase tests[] = {
    { "/daemon-config/order", test_order },
    { "/daemon-config/entry-text", test_entry_text },
    { "/daemon-config/empty", test_empty },
    { "/daemon-config/errors", test_errors },
    { "/daemon-config/load-missing", test_load_missing },
    { "/listen-fds/numbers-and-names", test_listen_fds_numbers_and_names },
};

/* Below the 30 s meson timeout, so that the watchdog reports first. */
TEST_MAIN(tests, 25)
