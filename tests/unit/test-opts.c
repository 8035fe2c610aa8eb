/*
 * Unit tests for Opts (util/opts.h): the key=value and JSON spellings of
 * structured options, the typed getters, inline children, lists, and the
 * detection of keys nobody asked for.
 *
 * Every test parses strings it writes itself; nothing depends on timing.
 */
#include <inttypes.h>
#include <stdint.h>
#include <string.h>
#include <glib.h>
#include <json-glib/json-glib.h>

#include "util/error.h"
#include "util/opts.h"
#include "test-helpers.h"
#include "util-test-helpers.h"

/* ------------------------------------------------------------------------ */
/* Helpers                                                                   */

/* Parse str (either form) and assert that it worked. */
static Opts *parse_ok(const char *str, const char *implied_key)
{
    Error *err = NULL;
    Opts *opts = opts_parse(str, implied_key, &err);

    if (!opts) {
        g_test_message("opts_parse(\"%s\") failed: %s", str,
                       err ? error_get_pretty(err) : "(no error set)");
        g_assert_not_reached();
    }
    g_assert_null(err);
    return opts;
}

/* assert_error_mentions(), then clear *errp. */
static void assert_error_mentions_clear(Error **errp, const char *word1,
                                        const char *word2)
{
    assert_error_mentions(*errp, word1, word2);
    g_clear_error(errp);
}

/* Assert that *errp's message is exactly msg; clear it. */
static void assert_error_is(Error **errp, const char *msg)
{
    g_autoptr(GError) err = g_steal_pointer(errp);

    g_assert_nonnull(err);
    g_assert_cmpstr(error_get_pretty(err), ==, msg);
}

/*
 * Parse str as key=value (with implied_key), assert that it fails and that
 * the message mentions word1 and word2.  A NULL errp must work too.
 */
static void keyval_bad(const char *str, const char *implied_key,
                       const char *word1, const char *word2)
{
    Error *err = NULL;
    Opts *opts = opts_parse_keyval(str, implied_key, &err);

    if (opts) {
        g_test_message("opts_parse_keyval(\"%s\") accepted it", str);
        g_assert_not_reached();
    }
    assert_error_mentions_clear(&err, word1, word2);
    g_assert_null(opts_parse_keyval(str, implied_key, NULL));
}

/* The string at key, which must be present. */
static const char *get_str(Opts *opts, const char *key)
{
    Error *err = NULL;
    const char *value = NULL;

    g_assert_true(opts_get_str(opts, key, NULL, &value, &err));
    g_assert_null(err);
    g_assert_nonnull(value);
    return value;
}

/* Assert that opts_check_unused() passes. */
static void assert_all_used(Opts *opts)
{
    Error *err = NULL;

    if (!opts_check_unused(opts, "test", &err)) {
        g_test_message("unexpected: %s", error_get_pretty(err));
        g_assert_not_reached();
    }
    g_assert_null(err);
}

/* Assert that opts_check_unused() reports exactly key. */
static void assert_unused(Opts *opts, const char *key)
{
    Error *err = NULL;
    g_autofree char *msg = g_strdup_printf("test: Invalid parameter '%s'",
                                           key);

    g_assert_false(opts_check_unused(opts, "test", &err));
    assert_error_is(&err, msg);
    g_assert_false(opts_check_unused(opts, "test", NULL));
}

/* The tree a JSON text parses to, for comparisons. */
static JsonNode *json_tree(const char *json)
{
    g_autoptr(JsonParser) parser = json_parser_new();

    g_assert_true(json_parser_load_from_data(parser, json, -1, NULL));
    return json_node_copy(json_parser_get_root(parser));
}

/*
 * Assert that opts holds exactly the tree in want, whose leaves are all
 * strings (as the key=value form builds them).  The tree is not exposed,
 * so walk want and read each member through the public API; reading them
 * all must then leave nothing unused, so opts holds nothing more.
 */
static void assert_opts_match(Opts *opts, JsonObject *want)
{
    g_autoptr(GList) names = json_object_get_members(want);

    for (GList *l = names; l; l = l->next) {
        JsonNode *member = json_object_get_member(want, l->data);

        g_assert_true(opts_has(opts, l->data));
        if (JSON_NODE_HOLDS_OBJECT(member)) {
            g_autoptr(Opts) child = opts_get_child(opts, l->data);

            g_assert_nonnull(child);
            assert_opts_match(child, json_node_get_object(member));
        } else {
            g_assert_cmpstr(get_str(opts, l->data), ==,
                            json_node_get_string(member));
        }
    }
    assert_all_used(opts);
}

/* Assert that str parses to the same tree as the JSON text json. */
static void assert_tree_is(const char *str, const char *implied_key,
                           const char *json)
{
    g_autoptr(Opts) opts = parse_ok(str, implied_key);
    g_autoptr(JsonNode) want = json_tree(json);

    g_assert_true(JSON_NODE_HOLDS_OBJECT(want));
    assert_opts_match(opts, json_node_get_object(want));
}

/* ------------------------------------------------------------------------ */
/* key=value parsing                                                         */

static void test_keyval_simple(void)
{
    g_autoptr(Opts) opts = parse_ok("driver=file,filename=a.img,aio=native",
                                    NULL);

    g_assert_cmpstr(get_str(opts, "driver"), ==, "file");
    g_assert_cmpstr(get_str(opts, "filename"), ==, "a.img");
    g_assert_cmpstr(get_str(opts, "aio"), ==, "native");
    g_assert_false(opts_has(opts, "node-name"));
    assert_all_used(opts);
}

static void test_keyval_value_with_equals(void)
{
    g_autoptr(Opts) opts = parse_ok("a=b=c,d=", NULL);

    g_assert_cmpstr(get_str(opts, "a"), ==, "b=c");
    g_assert_cmpstr(get_str(opts, "d"), ==, "");
}

static void test_keyval_comma_escape(void)
{
    g_autoptr(Opts) opts = parse_ok("filename=a,,b.img,x=1,y=end,,", NULL);

    g_assert_cmpstr(get_str(opts, "filename"), ==, "a,b.img");
    g_assert_cmpstr(get_str(opts, "x"), ==, "1");
    g_assert_cmpstr(get_str(opts, "y"), ==, "end,");
    assert_all_used(opts);
}

static void test_keyval_trailing_comma(void)
{
    g_autoptr(Opts) opts = parse_ok("a=1,b=2,", NULL);

    g_assert_cmpstr(get_str(opts, "a"), ==, "1");
    g_assert_cmpstr(get_str(opts, "b"), ==, "2");
    assert_all_used(opts);
}

static void test_keyval_empty(void)
{
    g_autoptr(Opts) empty = parse_ok("", NULL);
    g_autoptr(Opts) null = opts_parse_keyval(NULL, "qom-type", NULL);

    g_assert_nonnull(null);
    g_assert_false(opts_has(empty, "a"));
    assert_all_used(empty);
    assert_all_used(null);
}

static void test_keyval_implied_key(void)
{
    g_autoptr(Opts) opts = parse_ok("iothread,id=iot0,poll-max-ns=32768",
                                    "qom-type");
    g_autoptr(Opts) alone = parse_ok("iothread", "qom-type");
    g_autoptr(Opts) explicit = parse_ok("qom-type=iothread,id=x", "qom-type");

    g_assert_cmpstr(get_str(opts, "qom-type"), ==, "iothread");
    g_assert_cmpstr(get_str(opts, "id"), ==, "iot0");
    g_assert_cmpstr(get_str(opts, "poll-max-ns"), ==, "32768");
    assert_all_used(opts);
    g_assert_cmpstr(get_str(alone, "qom-type"), ==, "iothread");
    g_assert_cmpstr(get_str(explicit, "qom-type"), ==, "iothread");

    /* Only the first element may leave out its key. */
    keyval_bad("id=x,iothread", "qom-type", "'iothread'", "key=value");
    /* Without an implied key, none may. */
    keyval_bad("iothread,id=x", NULL, "'iothread'", "key=value");
    /* The implied key given again is a duplicate. */
    keyval_bad("iothread,qom-type=x", "qom-type", "'qom-type'", "twice");
}

static void test_keyval_nested(void)
{
    g_autoptr(Opts) opts = parse_ok("cache.direct=on,cache.no-flush=off,"
                                     "file.driver=file,file.filename=x.img",
                                     NULL);

    g_assert_cmpstr(get_str(opts, "cache.direct"), ==, "on");
    g_assert_cmpstr(get_str(opts, "cache.no-flush"), ==, "off");
    g_assert_cmpstr(get_str(opts, "file.driver"), ==, "file");
    g_assert_cmpstr(get_str(opts, "file.filename"), ==, "x.img");
    g_assert_true(opts_has(opts, "cache"));
    g_assert_true(opts_has(opts, "file"));
    assert_all_used(opts);

    assert_tree_is("cache.direct=on,driver=raw", NULL,
                   "{\"cache\": {\"direct\": \"on\"}, \"driver\": \"raw\"}");
    assert_tree_is("iothread,id=x,a.b.c=1,a.b.d=2,a.e=3", "qom-type",
                   "{\"qom-type\": \"iothread\", \"id\": \"x\", "
                   "\"a\": {\"b\": {\"c\": \"1\", \"d\": \"2\"}, "
                   "\"e\": \"3\"}}");
}

static void test_keyval_empty_key(void)
{
    keyval_bad("=1", NULL, "Empty parameter name", "'=1'");
    keyval_bad("a=1,=2", NULL, "Empty parameter name", "'=2'");
    keyval_bad("a..b=1", NULL, "'a..b'", "empty part");
    keyval_bad(".a=1", NULL, "'.a'", "empty part");
    keyval_bad("a.=1", NULL, "'a.'", "empty part");
    keyval_bad(".=1", NULL, "'.'", "empty part");
    keyval_bad(",a=1", "qom-type", "Empty element", NULL);
    keyval_bad(",", NULL, "Empty element", NULL);
}

static void test_keyval_duplicate(void)
{
    keyval_bad("a=1,a=2", NULL, "'a'", "twice");
    keyval_bad("a=1,a=1", NULL, "'a'", "twice");
    keyval_bad("cache.direct=on,x=1,cache.direct=off", NULL,
               "'cache.direct'", "twice");
}

static void test_keyval_scalar_and_object(void)
{
    Error *err = NULL;

    g_assert_null(opts_parse_keyval("cache=on,cache.direct=on", NULL, &err));
    assert_error_is(&err, "Parameter 'cache' is given a value and also "
                    "members ('cache.direct')");
    g_assert_null(opts_parse_keyval("cache.direct=on,cache=on", NULL, &err));
    assert_error_is(&err, "Parameter 'cache' is given a value and also "
                    "members ('cache.direct')");
    keyval_bad("a.b=1,a.b.c=2", NULL, "'a.b'", "'a.b.c'");
    keyval_bad("a.b.c=2,a.b=1", NULL, "'a.b'", "'a.b.c'");
}

static void test_keyval_missing_equals(void)
{
    keyval_bad("a=1,b", NULL, "'b'", "key=value");
    keyval_bad("a=1,b,c=2", "qom-type", "'b'", "key=value");
    keyval_bad("foo", NULL, "'foo'", "key=value");
}

/* ------------------------------------------------------------------------ */
/* JSON parsing                                                              */

static void test_json_simple(void)
{
    g_autoptr(Opts) opts = parse_ok("{\"driver\": \"file\", "
                                    "\"cache\": {\"direct\": true}}", NULL);
    bool direct = false;

    g_assert_cmpstr(get_str(opts, "driver"), ==, "file");
    g_assert_true(opts_get_bool(opts, "cache.direct", false, &direct, NULL));
    g_assert_true(direct);
    assert_all_used(opts);
}

static void test_json_detect(void)
{
    /* Leading blanks before '{' still mean JSON; implied_key is unused. */
    g_autoptr(Opts) opts = parse_ok("  \n\t{\"id\": \"x\"}", "qom-type");
    g_autoptr(Opts) direct = opts_parse_json("{\"id\": \"y\"}", NULL);

    g_assert_cmpstr(get_str(opts, "id"), ==, "x");
    g_assert_false(opts_has(opts, "qom-type"));
    g_assert_nonnull(direct);
    g_assert_cmpstr(get_str(direct, "id"), ==, "y");
}

static void test_json_errors(void)
{
    Error *err = NULL;

    g_assert_null(opts_parse("{\"driver\": ", NULL, &err));
    assert_error_mentions_clear(&err, "Invalid JSON", NULL);
    g_assert_null(opts_parse("{\"a\": 1,}", NULL, &err));
    assert_error_mentions_clear(&err, "Invalid JSON", NULL);
    g_assert_null(opts_parse("{\"a\": }", NULL, NULL));

    g_assert_null(opts_parse_json("[{\"a\": 1}]", &err));
    assert_error_mentions_clear(&err, "JSON object", "a list");
    g_assert_null(opts_parse_json("\"str\"", &err));
    assert_error_mentions_clear(&err, "JSON object", "'str'");
    g_assert_null(opts_parse_json("42", &err));
    assert_error_mentions_clear(&err, "JSON object", "'42'");
    g_assert_null(opts_parse_json("", &err));
    assert_error_mentions_clear(&err, "JSON", NULL);
}

static void test_json_from_object(void)
{
    g_autoptr(JsonNode) tree = json_tree("{\"a\": \"1\", \"b\": {\"c\": 2}}");
    JsonObject *obj = json_node_get_object(tree);
    Opts *opts = opts_new_from_object(obj);
    int64_t c = 0;

    /* opts holds its own reference: it outlives the caller's. */
    g_clear_pointer(&tree, json_node_unref);
    g_assert_cmpstr(get_str(opts, "a"), ==, "1");
    g_assert_true(opts_get_int(opts, "b.c", 0, 10, 0, &c, NULL));
    g_assert_cmpint(c, ==, 2);
    assert_all_used(opts);
    opts_free(opts);
    opts_free(NULL);
}

/* ------------------------------------------------------------------------ */
/* Getters                                                                   */

static void test_get_str(void)
{
    g_autoptr(Opts) kv = parse_ok("id=x,n=5", NULL);
    g_autoptr(Opts) js = parse_ok("{\"id\": \"x\", \"n\": 5, \"b\": true, "
                                  "\"o\": {}, \"l\": [], \"z\": null}", NULL);
    const char *s = NULL;
    Error *err = NULL;

    g_assert_cmpstr(get_str(kv, "id"), ==, "x");
    g_assert_cmpstr(get_str(kv, "n"), ==, "5");     /* all strings here */
    g_assert_cmpstr(get_str(js, "id"), ==, "x");

    g_assert_true(opts_get_str(kv, "missing", "dflt", &s, &err));
    g_assert_cmpstr(s, ==, "dflt");
    g_assert_true(opts_get_str(js, "missing", NULL, &s, &err));
    g_assert_null(s);
    g_assert_null(err);

    /* JSON types other than string are errors naming the key. */
    s = "untouched";
    g_assert_false(opts_get_str(js, "n", NULL, &s, &err));
    assert_error_is(&err, "Parameter 'n' expects a string, got '5'");
    g_assert_cmpstr(s, ==, "untouched");
    g_assert_false(opts_get_str(js, "b", NULL, &s, &err));
    assert_error_is(&err, "Parameter 'b' expects a string, got 'true'");
    g_assert_false(opts_get_str(js, "o", NULL, &s, &err));
    assert_error_is(&err, "Parameter 'o' expects a string, got an object");
    g_assert_false(opts_get_str(js, "l", NULL, &s, &err));
    assert_error_is(&err, "Parameter 'l' expects a string, got a list");
    g_assert_false(opts_get_str(js, "z", NULL, &s, NULL));
}

/* opts_get_bool() that must succeed: the value. */
static bool bool_ok(Opts *opts, const char *key, bool def)
{
    Error *err = NULL;
    bool b = !def;

    g_assert_true(opts_get_bool(opts, key, def, &b, &err));
    g_assert_null(err);
    return b;
}

static void test_get_bool(void)
{
    g_autoptr(Opts) js = parse_ok("{\"t\": true, \"f\": false, \"n\": 1, "
                                  "\"s\": \"on\", \"cache\": "
                                  "{\"direct\": \"maybe\"}}", NULL);
    g_autoptr(Opts) kv = parse_ok("cache.direct=maybe,e=", NULL);
    Error *err = NULL;
    bool b;

    for (size_t i = 0; i < G_N_ELEMENTS(bool_spellings); i++) {
        g_autofree char *str = g_strdup_printf("x=%s", bool_spellings[i].text);
        g_autoptr(Opts) opts = parse_ok(str, NULL);

        b = !bool_spellings[i].value;
        g_assert_true(opts_get_bool(opts, "x", false, &b, &err));
        g_assert_null(err);
        g_assert_cmpint(b, ==, bool_spellings[i].value);
    }
    g_assert_true(bool_ok(js, "t", false));
    g_assert_false(bool_ok(js, "f", true));
    g_assert_true(bool_ok(js, "s", false));

    /* Defaults. */
    g_assert_true(bool_ok(kv, "missing", true));
    g_assert_false(bool_ok(kv, "cache.missing", false));

    /* Bad values name the full dotted key, in both forms. */
    for (int i = 0; i < 2; i++) {
        g_assert_false(opts_get_bool(i ? js : kv, "cache.direct", false, &b,
                                     &err));
        assert_error_is(&err, "Parameter 'cache.direct' expects 'on' or "
                        "'off', got 'maybe'");
    }
    g_assert_false(opts_get_bool(kv, "e", false, &b, &err));
    assert_error_mentions_clear(&err, "'e'", "'on' or 'off'");
    g_assert_false(opts_get_bool(js, "n", false, &b, &err));
    assert_error_is(&err, "Parameter 'n' expects 'on' or 'off', got '1'");
    g_assert_false(opts_get_bool(js, "cache", false, &b, &err));
    assert_error_mentions_clear(&err, "'cache'", "an object");
}

/* opts_get_int() that must succeed: the value. */
static int64_t int_ok(Opts *opts, const char *key, int64_t min, int64_t max,
                      int64_t def)
{
    Error *err = NULL;
    int64_t v = 0;

    g_assert_true(opts_get_int(opts, key, min, max, def, &v, &err));
    g_assert_null(err);
    return v;
}

static void test_get_int(void)
{
    g_autoptr(Opts) kv = parse_ok("a=42,b=-7,h=0x10,big=1000,junk=12x,e=,"
                                  "huge=99999999999999999999", NULL);
    g_autoptr(Opts) js = parse_ok("{\"a\": 42, \"b\": -7, \"s\": \"0x10\", "
                                  "\"big\": 1000, \"d\": 1.5, \"t\": true, "
                                  "\"q\": {\"n\": 3}}", NULL);
    Error *err = NULL;
    int64_t v;

    g_assert_cmpint(int_ok(kv, "a", 0, 100, 0), ==, 42);
    g_assert_cmpint(int_ok(kv, "b", -10, 0, 0), ==, -7);
    g_assert_cmpint(int_ok(kv, "h", 0, 100, 0), ==, 16);
    g_assert_cmpint(int_ok(js, "a", 0, 100, 0), ==, 42);
    g_assert_cmpint(int_ok(js, "b", -10, 0, 0), ==, -7);
    g_assert_cmpint(int_ok(js, "s", 0, 100, 0), ==, 16);
    g_assert_cmpint(int_ok(js, "q.n", 0, 100, 0), ==, 3);
    g_assert_null(err);

    g_assert_cmpint(int_ok(kv, "missing", 0, 100, 77), ==, 77);
    g_assert_cmpint(int_ok(js, "q.missing", 0, 100, -1), ==, -1);

    /* Range: the same message for a string and a JSON integer. */
    v = 5;
    for (int i = 0; i < 2; i++) {
        g_assert_false(opts_get_int(i ? js : kv, "big", 0, 999, 0, &v, &err));
        assert_error_is(&err, "Parameter 'big' expects an integer from 0 to "
                        "999, got '1000'");
    }
    g_assert_false(opts_get_int(js, "b", 0, 10, 0, &v, &err));
    assert_error_mentions_clear(&err, "'b'", "-7");
    g_assert_cmpint(v, ==, 5);

    g_assert_false(opts_get_int(kv, "junk", 0, 100, 0, &v, &err));
    assert_error_is(&err, "Parameter 'junk' expects an integer, got '12x'");
    g_assert_false(opts_get_int(kv, "e", 0, 100, 0, &v, &err));
    assert_error_mentions_clear(&err, "'e'", "integer");
    g_assert_false(opts_get_int(kv, "huge", INT64_MIN, INT64_MAX, 0, &v,
                                &err));
    assert_error_mentions_clear(&err, "'huge'", NULL);
    g_assert_false(opts_get_int(js, "d", 0, 100, 0, &v, &err));
    assert_error_is(&err, "Parameter 'd' expects an integer, got '1.5'");
    g_assert_false(opts_get_int(js, "t", 0, 100, 0, &v, &err));
    assert_error_is(&err, "Parameter 't' expects an integer, got 'true'");
    g_assert_false(opts_get_int(js, "q", 0, 100, 0, &v, NULL));
    g_assert_cmpint(v, ==, 5);
}

/* opts_get_size() of the key=value string "s=<str>". */
static bool size_of(const char *str, uint64_t *out, Error **errp)
{
    g_autofree char *text = g_strdup_printf("s=%s", str);
    g_autoptr(Opts) opts = parse_ok(text, NULL);

    return opts_get_size(opts, "s", 0, out, errp);
}

static uint64_t size_ok(const char *str)
{
    Error *err = NULL;
    uint64_t v = 0;

    if (!size_of(str, &v, &err)) {
        g_test_message("size '%s' rejected: %s", str, error_get_pretty(err));
        g_assert_not_reached();
    }
    g_assert_null(err);
    return v;
}

static void size_bad(const char *str, const char *word)
{
    Error *err = NULL;
    uint64_t v = 12345;

    if (size_of(str, &v, &err)) {
        g_test_message("size '%s' accepted as %" PRIu64, str, v);
        g_assert_not_reached();
    }
    g_assert_cmpuint(v, ==, 12345);
    assert_error_mentions_clear(&err, "Parameter 's'", word);
}

static void test_get_size(void)
{
    g_autoptr(Opts) js = parse_ok("{\"a\": 4096, \"z\": 0, \"k\": \"4k\", "
                                  "\"neg\": -1, \"d\": 1.5, \"t\": true}",
                                  NULL);
    Error *err = NULL;
    uint64_t v;

    g_assert_cmpuint(size_ok("0"), ==, 0);
    g_assert_cmpuint(size_ok("4096"), ==, 4096);
    g_assert_cmpuint(size_ok("4k"), ==, 4096);
    g_assert_cmpuint(size_ok("4K"), ==, 4096);
    g_assert_cmpuint(size_ok("64k"), ==, 65536);
    g_assert_cmpuint(size_ok("1M"), ==, 1048576);
    g_assert_cmpuint(size_ok("2G"), ==, UINT64_C(2) << 30);
    g_assert_cmpuint(size_ok("1T"), ==, UINT64_C(1) << 40);
    g_assert_cmpuint(size_ok("0x1000"), ==, 4096);
    /* The largest accepted values: INT64_MAX and 2^63 - 2^40. */
    g_assert_cmpuint(size_ok("9223372036854775807"), ==, INT64_MAX);
    g_assert_cmpuint(size_ok("8388607T"), ==, (UINT64_C(1) << 63) -
                                              (UINT64_C(1) << 40));

    size_bad("4kb", "'4kb'");
    size_bad("1.5G", "'1.5G'");
    size_bad("-1", "'-1'");
    size_bad("", "size");
    size_bad("k", "'k'");
    size_bad("4 k", "'4 k'");
    size_bad(" 4", "size");
    size_bad("4P", "'4P'");
    size_bad("0x", "size");
    size_bad("0x10k", "'0x10k'");
    size_bad("9223372036854775808", "too large");
    size_bad("99999999999999999999999", "too large");
    size_bad("8388608T", "too large");
    size_bad("8589934592G", "too large");

    g_assert_true(opts_get_size(js, "a", 0, &v, &err));
    g_assert_cmpuint(v, ==, 4096);
    g_assert_true(opts_get_size(js, "z", 1, &v, &err));
    g_assert_cmpuint(v, ==, 0);
    g_assert_true(opts_get_size(js, "k", 0, &v, &err));
    g_assert_cmpuint(v, ==, 4096);
    g_assert_true(opts_get_size(js, "missing", 512, &v, &err));
    g_assert_cmpuint(v, ==, 512);
    g_assert_null(err);

    g_assert_false(opts_get_size(js, "neg", 0, &v, &err));
    assert_error_mentions_clear(&err, "'neg'", "'-1'");
    g_assert_false(opts_get_size(js, "d", 0, &v, &err));
    assert_error_mentions_clear(&err, "'d'", "'1.5'");
    g_assert_false(opts_get_size(js, "t", 0, &v, &err));
    assert_error_mentions_clear(&err, "'t'", "'true'");
    g_assert_cmpuint(v, ==, 512);
}

static void test_get_enum(void)
{
    static const char *const modes[] = { "threads", "native", "io_uring",
                                         NULL };
    g_autoptr(Opts) kv = parse_ok("aio=native,bad=posix", NULL);
    g_autoptr(Opts) js = parse_ok("{\"aio\": \"io_uring\", \"n\": 1}", NULL);
    Error *err = NULL;
    int v;

    g_assert_true(opts_get_enum(kv, "aio", modes, 0, &v, &err));
    g_assert_cmpint(v, ==, 1);
    g_assert_true(opts_get_enum(js, "aio", modes, 0, &v, &err));
    g_assert_cmpint(v, ==, 2);
    g_assert_true(opts_get_enum(kv, "missing", modes, -1, &v, &err));
    g_assert_cmpint(v, ==, -1);
    g_assert_null(err);

    v = 9;
    g_assert_false(opts_get_enum(kv, "bad", modes, 0, &v, &err));
    assert_error_is(&err, "Parameter 'bad' expects one of 'threads', "
                    "'native', 'io_uring', got 'posix'");
    g_assert_false(opts_get_enum(js, "n", modes, 0, &v, &err));
    assert_error_mentions_clear(&err, "'n'", "'threads', 'native', 'io_uring'");
    g_assert_cmpint(v, ==, 9);
}

static void test_has(void)
{
    g_autoptr(Opts) opts = parse_ok("a=1,b.c=2", NULL);

    g_assert_true(opts_has(opts, "a"));
    g_assert_true(opts_has(opts, "b"));
    g_assert_true(opts_has(opts, "b.c"));
    g_assert_false(opts_has(opts, "b.d"));
    g_assert_false(opts_has(opts, "a.x"));  /* a is not an object */
    g_assert_false(opts_has(opts, "c"));
    /* opts_has() does not count as reading the key. */
    assert_unused(opts, "a");
}

/* ------------------------------------------------------------------------ */
/* Children                                                                  */

/* Read a "file" child's keys and check it; shared by both spellings. */
static void check_file_child(Opts *opts)
{
    g_autoptr(Opts) child = opts_get_child(opts, "file");
    bool direct = false;

    g_assert_nonnull(child);
    g_assert_cmpstr(get_str(child, "driver"), ==, "file");
    g_assert_cmpstr(get_str(child, "filename"), ==, "a.img");
    g_assert_true(opts_get_bool(child, "cache.direct", false, &direct, NULL));
    g_assert_true(direct);
    assert_all_used(child);
}

static void test_child(void)
{
    g_autoptr(Opts) kv = parse_ok("driver=raw,file.driver=file,"
                                  "file.filename=a.img,file.cache.direct=on",
                                  NULL);
    g_autoptr(Opts) js = parse_ok("{\"driver\": \"raw\", \"file\": "
                                  "{\"driver\": \"file\", \"filename\": "
                                  "\"a.img\", \"cache\": {\"direct\": true}}}",
                                  NULL);

    g_assert_cmpstr(get_str(kv, "driver"), ==, "raw");
    check_file_child(kv);
    assert_all_used(kv);

    g_assert_cmpstr(get_str(js, "driver"), ==, "raw");
    check_file_child(js);
    assert_all_used(js);
}

static void test_child_absent_or_reference(void)
{
    g_autoptr(Opts) opts = parse_ok("driver=raw,file=disk0", NULL);

    g_assert_null(opts_get_child(opts, "backing"));
    /* A string is a node-name reference, not an inline child. */
    g_assert_null(opts_get_child(opts, "file"));
    /* ... and opts_get_child() did not claim it. */
    g_assert_cmpstr(get_str(opts, "driver"), ==, "raw");
    assert_unused(opts, "file");
    g_assert_cmpstr(get_str(opts, "file"), ==, "disk0");
    assert_all_used(opts);
}

static void test_child_unused(void)
{
    g_autoptr(Opts) opts = parse_ok("driver=raw,file.driver=file,"
                                    "file.filename=a.img,file.cache.dirct=on",
                                    NULL);
    g_autoptr(Opts) child = opts_get_child(opts, "file");
    Error *err = NULL;
    bool b;

    g_assert_nonnull(child);
    get_str(opts, "driver");
    /* The parent counts the whole child as used ... */
    assert_all_used(opts);
    /* ... the child itself names what it did not read, by full path. */
    get_str(child, "driver");
    get_str(child, "filename");
    g_assert_true(opts_get_bool(child, "cache.direct", false, &b, NULL));
    assert_unused(child, "file.cache.dirct");

    /* Getter errors in a child also name the full path. */
    g_assert_false(opts_get_int(child, "filename", 0, 1, 0,
                                &(int64_t){ 0 }, &err));
    assert_error_is(&err, "Parameter 'file.filename' expects an integer, "
                    "got 'a.img'");
}

static void test_child_of_child(void)
{
    g_autoptr(Opts) opts = parse_ok("{\"file\": {\"file\": "
                                    "{\"filename\": \"x\", \"extra\": 1}}}",
                                    NULL);
    g_autoptr(Opts) mid = opts_get_child(opts, "file");
    g_autoptr(Opts) leaf = opts_get_child(mid, "file");

    g_assert_nonnull(leaf);
    g_assert_cmpstr(get_str(leaf, "filename"), ==, "x");
    assert_all_used(opts);
    assert_all_used(mid);
    assert_unused(leaf, "file.file.extra");
}

/* ------------------------------------------------------------------------ */
/* Lists                                                                     */

/* The "errno" of each element of the list at "inject-error", as a string. */
static char *list_errnos(Opts *opts)
{
    g_autoptr(GPtrArray) list = NULL;
    g_autoptr(GString) out = g_string_new(NULL);
    Error *err = NULL;

    list = opts_get_list(opts, "inject-error", &err);
    g_assert_null(err);
    g_assert_nonnull(list);
    for (guint i = 0; i < list->len; i++) {
        Opts *elem = g_ptr_array_index(list, i);
        int64_t e;

        g_assert_true(opts_get_int(elem, "errno", 0, 200, -1, &e, NULL));
        g_string_append_printf(out, "%s%" PRId64, i ? "," : "", e);
        assert_all_used(elem);
    }
    return g_strdup(out->str);
}

static void test_list(void)
{
    g_autoptr(Opts) kv = parse_ok("driver=blkdebug,inject-error.0.errno=5,"
                                  "inject-error.1.errno=28", NULL);
    g_autoptr(Opts) js = parse_ok("{\"driver\": \"blkdebug\", "
                                  "\"inject-error\": [{\"errno\": 5}, "
                                  "{\"errno\": \"28\"}]}", NULL);
    g_autoptr(Opts) unordered = parse_ok("inject-error.1.errno=28,"
                                         "inject-error.0.errno=5", NULL);
    g_autoptr(Opts) obj_json = parse_ok("{\"inject-error\": {\"1\": "
                                        "{\"errno\": 28}, \"0\": "
                                        "{\"errno\": 5}}}", NULL);
    g_autofree char *a = list_errnos(kv);
    g_autofree char *b = list_errnos(js);
    g_autofree char *c = list_errnos(unordered);
    g_autofree char *d = list_errnos(obj_json);

    g_assert_cmpstr(a, ==, "5,28");
    g_assert_cmpstr(b, ==, "5,28");
    g_assert_cmpstr(c, ==, "5,28");
    g_assert_cmpstr(d, ==, "5,28");

    /* The list counts as used in the parent. */
    get_str(kv, "driver");
    get_str(js, "driver");
    assert_all_used(kv);
    assert_all_used(js);
    assert_all_used(unordered);
    assert_all_used(obj_json);
}

static void test_list_absent_and_empty(void)
{
    g_autoptr(Opts) opts = parse_ok("{\"empty\": [], \"eobj\": {}}", NULL);
    g_autoptr(GPtrArray) absent = opts_get_list(opts, "inject-error", NULL);
    g_autoptr(GPtrArray) empty = opts_get_list(opts, "empty", NULL);
    g_autoptr(GPtrArray) eobj = opts_get_list(opts, "eobj", NULL);

    g_assert_nonnull(absent);
    g_assert_cmpuint(absent->len, ==, 0);
    g_assert_nonnull(empty);
    g_assert_cmpuint(empty->len, ==, 0);
    g_assert_nonnull(eobj);
    g_assert_cmpuint(eobj->len, ==, 0);
    assert_all_used(opts);
}

static void test_list_element_unused(void)
{
    g_autoptr(Opts) opts = parse_ok("inject-error.0.errno=5,"
                                    "inject-error.1.errno=28,"
                                    "inject-error.1.sectr=7", NULL);
    g_autoptr(GPtrArray) list = opts_get_list(opts, "inject-error", NULL);
    int64_t e;

    g_assert_nonnull(list);
    g_assert_cmpuint(list->len, ==, 2);
    for (guint i = 0; i < list->len; i++) {
        g_assert_true(opts_get_int(g_ptr_array_index(list, i), "errno", 0,
                                   200, 0, &e, NULL));
    }
    assert_all_used(g_ptr_array_index(list, 0));
    assert_unused(g_ptr_array_index(list, 1), "inject-error.1.sectr");
    assert_all_used(opts);
}

/* opts_get_list(str, "l") must fail and mention word1 and word2. */
static void list_bad(const char *str, const char *word1, const char *word2)
{
    g_autoptr(Opts) opts = parse_ok(str, NULL);
    Error *err = NULL;

    g_assert_null(opts_get_list(opts, "l", &err));
    assert_error_mentions_clear(&err, word1, word2);
    g_assert_null(opts_get_list(opts, "l", NULL));
}

static void test_list_errors(void)
{
    /* Gaps, in both forms of the object spelling. */
    list_bad("l.0.a=1,l.2.a=2", "'l'", "no element 1");
    list_bad("l.1.a=1", "'l'", "no element 0");
    list_bad("{\"l\": {\"0\": {}, \"2\": {}}}", "'l'", "no element 1");
    /* Names that are not indexes. */
    list_bad("l.0.a=1,l.x.a=2", "'l.x'", "not a list index");
    list_bad("l.01.a=1", "'l.01'", "not a list index");
    list_bad("l.-1.a=1", "'l.-1'", "not a list index");
    list_bad("l.0.a=1,l.99999999999999999999.a=1", "'l'", "no element 1");
    /* Elements that are not objects. */
    list_bad("l.0=5", "'l.0'", "an object");
    list_bad("{\"l\": [{\"a\": 1}, 5]}", "'l.1'", "an object");
    list_bad("{\"l\": [\"x\"]}", "'l.0'", "'x'");
    /* Not a list at all. */
    list_bad("l=5", "'l'", "a list");
    list_bad("{\"l\": true}", "'l'", "a list");
}

/* The "node-name" of each element of the list at "lun", comma-separated
 * ("-" where absent), every element's keys used up. */
static char *list_node_names(Opts *opts)
{
    g_autoptr(GPtrArray) list = NULL;
    g_autoptr(GString) out = g_string_new(NULL);
    Error *err = NULL;

    list = opts_get_list_implied(opts, "lun", "node-name", &err);
    g_assert_null(err);
    g_assert_nonnull(list);
    for (guint i = 0; i < list->len; i++) {
        Opts *elem = g_ptr_array_index(list, i);
        const char *name;

        g_assert_true(opts_get_str(elem, "node-name", "-", &name, NULL));
        g_string_append_printf(out, "%s%s", i ? "," : "", name);
    }
    return g_strdup(out->str);
}

static void test_list_implied(void)
{
    g_autoptr(Opts) kv = parse_ok("lun.0=d0,lun.1.node-name=d1", NULL);
    g_autoptr(Opts) js = parse_ok("{\"lun\": [\"d0\", "
                                  "{\"node-name\": \"d1\"}]}", NULL);
    g_autoptr(Opts) extra = parse_ok("lun.0=d0,lun.1.node-name=d1,"
                                     "lun.1.serial=s", NULL);
    g_autoptr(GPtrArray) list = NULL;
    g_autofree char *a = list_node_names(kv);
    g_autofree char *b = list_node_names(js);
    Error *err = NULL;

    g_assert_cmpstr(a, ==, "d0,d1");
    g_assert_cmpstr(b, ==, "d0,d1");
    assert_all_used(kv);
    assert_all_used(js);

    /* The string element's Opts names its key by the list path. */
    list = opts_get_list_implied(extra, "lun", "node-name", NULL);
    g_assert_nonnull(list);
    g_assert_true(opts_get_str(g_ptr_array_index(list, 0), "node-name",
                               NULL, &(const char *){ NULL }, NULL));
    assert_all_used(g_ptr_array_index(list, 0));
    assert_unused(g_ptr_array_index(list, 1), "lun.1.node-name");

    /* Other scalars are still not elements. */
    {
        g_autoptr(Opts) bad = parse_ok("{\"lun\": [5]}", NULL);

        g_assert_null(opts_get_list_implied(bad, "lun", "node-name", &err));
        assert_error_mentions_clear(&err, "'lun.0'", "an object or a string");
    }
    /* Without an implied key, plain opts_get_list() is unchanged. */
    g_assert_null(opts_get_list(kv, "lun", NULL));
}

/* ------------------------------------------------------------------------ */
/* Unused keys                                                               */

static void test_unused_top(void)
{
    g_autoptr(Opts) opts = parse_ok("driver=file,filenme=a.img", NULL);
    Error *err = NULL;

    get_str(opts, "driver");
    g_assert_false(opts_check_unused(opts, "node 'd0'", &err));
    assert_error_is(&err, "node 'd0': Invalid parameter 'filenme'");
}

static void test_unused_nested(void)
{
    g_autoptr(Opts) kv = parse_ok("cache.direct=on,cache.dirct=on", NULL);
    g_autoptr(Opts) js = parse_ok("{\"cache\": {\"direct\": true, "
                                  "\"dirct\": true}}", NULL);
    bool b;

    g_assert_true(opts_get_bool(kv, "cache.direct", false, &b, NULL));
    assert_unused(kv, "cache.dirct");
    g_assert_true(opts_get_bool(js, "cache.direct", false, &b, NULL));
    assert_unused(js, "cache.dirct");
}

static void test_unused_order(void)
{
    /* The first unused key as written, whatever the hash order. */
    g_autoptr(Opts) kv = parse_ok("zz=1,a=1,mm.x=1,b=1", NULL);
    g_autoptr(Opts) js = parse_ok("{\"zz\": 1, \"a\": 1, \"mm\": {\"x\": 1}, "
                                  "\"b\": 1}", NULL);

    assert_unused(kv, "zz");
    assert_unused(js, "zz");
    get_str(kv, "zz");
    g_assert_true(opts_get_int(js, "zz", 0, 9, 0, &(int64_t){ 0 }, NULL));
    assert_unused(kv, "a");
    assert_unused(js, "a");
    get_str(kv, "a");
    g_assert_true(opts_get_int(js, "a", 0, 9, 0, &(int64_t){ 0 }, NULL));
    assert_unused(kv, "mm.x");
    assert_unused(js, "mm.x");
}

static void test_unused_empty_object(void)
{
    g_autoptr(Opts) typo = parse_ok("{\"cahce\": {}}", NULL);
    g_autoptr(Opts) ok = parse_ok("{\"cache\": {}}", NULL);
    bool b;

    /* An empty object nobody looked into is a typo like any other key. */
    g_assert_true(opts_get_bool(typo, "cache.direct", false, &b, NULL));
    assert_unused(typo, "cahce");
    /* An empty object a getter looked into is fine: its members are
     * optional. */
    g_assert_true(opts_get_bool(ok, "cache.direct", false, &b, NULL));
    assert_all_used(ok);
}

static void test_unused_lists_and_nulls(void)
{
    g_autoptr(Opts) opts = parse_ok("{\"a\": \"x\", \"l\": [{\"b\": 1}], "
                                    "\"n\": null}", NULL);

    get_str(opts, "a");
    assert_unused(opts, "l");
    g_ptr_array_unref(opts_get_list(opts, "l", NULL));
    assert_unused(opts, "n");
}

static void test_unused_no_what(void)
{
    g_autoptr(Opts) opts = parse_ok("x=1", NULL);
    Error *err = NULL;

    g_assert_false(opts_check_unused(opts, NULL, &err));
    assert_error_is(&err, "Invalid parameter 'x'");
}

static void test_unused_dotted_json_member(void)
{
    /* A JSON member named "cache.direct" is not the nested key. */
    g_autoptr(Opts) opts = parse_ok("{\"cache.direct\": true}", NULL);

    g_assert_false(opts_has(opts, "cache.direct"));
    g_assert_false(bool_ok(opts, "cache.direct", false));
    assert_unused(opts, "cache.direct");
}

/* ------------------------------------------------------------------------ */
/* Both spellings                                                            */

/* What a file driver would read from a --blockdev line. */
typedef struct FileOpts {
    const char *driver;
    const char *node_name;
    const char *filename;
    bool direct;
    int aio;
} FileOpts;

static void read_file_opts(Opts *opts, FileOpts *fo)
{
    static const char *const aio_modes[] = { "threads", "native", "io_uring",
                                             NULL };
    Error *err = NULL;

    g_assert_true(opts_get_str(opts, "driver", NULL, &fo->driver, &err));
    g_assert_true(opts_get_str(opts, "node-name", NULL, &fo->node_name,
                               &err));
    g_assert_true(opts_get_str(opts, "filename", NULL, &fo->filename, &err));
    g_assert_true(opts_get_bool(opts, "cache.direct", false, &fo->direct,
                                &err));
    g_assert_true(opts_get_enum(opts, "aio", aio_modes, 0, &fo->aio, &err));
    g_assert_null(err);
    assert_all_used(opts);
}

static void test_equivalent_blockdev(void)
{
    g_autoptr(Opts) kv = parse_ok("driver=file,node-name=d0,filename=a.img,"
                                  "cache.direct=on,aio=native", NULL);
    g_autoptr(Opts) js = parse_ok("{\"driver\": \"file\", \"node-name\": "
                                  "\"d0\", \"filename\": \"a.img\", "
                                  "\"cache\": {\"direct\": true}, "
                                  "\"aio\": \"native\"}", NULL);
    FileOpts a = { 0 }, b = { 0 };

    read_file_opts(kv, &a);
    read_file_opts(js, &b);
    g_assert_cmpstr(a.driver, ==, "file");
    g_assert_cmpstr(a.driver, ==, b.driver);
    g_assert_cmpstr(a.node_name, ==, "d0");
    g_assert_cmpstr(a.node_name, ==, b.node_name);
    g_assert_cmpstr(a.filename, ==, "a.img");
    g_assert_cmpstr(a.filename, ==, b.filename);
    g_assert_true(a.direct);
    g_assert_cmpint(a.direct, ==, b.direct);
    g_assert_cmpint(a.aio, ==, 1);
    g_assert_cmpint(a.aio, ==, b.aio);

    /* With strings in the JSON, the two trees are the same. */
    assert_tree_is("driver=file,node-name=d0,filename=a.img,"
                   "cache.direct=on,aio=native", NULL,
                   "{\"driver\": \"file\", \"node-name\": \"d0\", "
                   "\"filename\": \"a.img\", \"cache\": {\"direct\": \"on\"},"
                   " \"aio\": \"native\"}");
}

static const TestCase tests[] = {
    { "/opts/keyval/simple", test_keyval_simple },
    { "/opts/keyval/value-with-equals", test_keyval_value_with_equals },
    { "/opts/keyval/comma-escape", test_keyval_comma_escape },
    { "/opts/keyval/trailing-comma", test_keyval_trailing_comma },
    { "/opts/keyval/empty", test_keyval_empty },
    { "/opts/keyval/implied-key", test_keyval_implied_key },
    { "/opts/keyval/nested", test_keyval_nested },
    { "/opts/keyval/error/empty-key", test_keyval_empty_key },
    { "/opts/keyval/error/duplicate", test_keyval_duplicate },
    { "/opts/keyval/error/scalar-and-object", test_keyval_scalar_and_object },
    { "/opts/keyval/error/missing-equals", test_keyval_missing_equals },
    { "/opts/json/simple", test_json_simple },
    { "/opts/json/detect", test_json_detect },
    { "/opts/json/errors", test_json_errors },
    { "/opts/json/from-object", test_json_from_object },
    { "/opts/get/str", test_get_str },
    { "/opts/get/bool", test_get_bool },
    { "/opts/get/int", test_get_int },
    { "/opts/get/size", test_get_size },
    { "/opts/get/enum", test_get_enum },
    { "/opts/has", test_has },
    { "/opts/child/both-forms", test_child },
    { "/opts/child/absent-or-reference", test_child_absent_or_reference },
    { "/opts/child/unused", test_child_unused },
    { "/opts/child/of-child", test_child_of_child },
    { "/opts/list/both-forms", test_list },
    { "/opts/list/absent-and-empty", test_list_absent_and_empty },
    { "/opts/list/element-unused", test_list_element_unused },
    { "/opts/list/errors", test_list_errors },
    { "/opts/list/implied-key", test_list_implied },
    { "/opts/unused/top", test_unused_top },
    { "/opts/unused/nested", test_unused_nested },
    { "/opts/unused/order", test_unused_order },
    { "/opts/unused/empty-object", test_unused_empty_object },
    { "/opts/unused/lists-and-nulls", test_unused_lists_and_nulls },
    { "/opts/unused/no-what", test_unused_no_what },
    { "/opts/unused/dotted-json-member", test_unused_dotted_json_member },
    { "/opts/equivalent/blockdev", test_equivalent_blockdev },
};

/* Below the 30 s meson timeout, so that the watchdog reports first. */
TEST_MAIN(tests, 25)
