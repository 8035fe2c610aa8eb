/*
 * Unit tests for the helpers the tools and benchmarks share: option values
 * (util/cli-parse.h), CPU lists (util/cpu-list.h) and fixed-endian loads
 * and stores (util/bswap.h).
 *
 * Theory of operation: each parser gets a table of strings it must accept,
 * with the value expected, and a table it must refuse.  A refusal must
 * leave the output alone and produce one message that starts with the
 * option's name and shows the string given, since that is all a user sees.
 * The CPU-list tests check the order and the expansion of ranges, and the
 * affinity check against this process's own mask (read with
 * sched_getaffinity, so the test holds on any machine).  The byte-order
 * tests pin every helper against a fixed byte pattern at an odd address,
 * so a helper that assumed the host's order or alignment would fail on
 * any host.
 */
#include <inttypes.h>
#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <string.h>

#include <glib.h>

#include "util/bswap.h"
#include "util/cli-parse.h"
#include "util/cpu-list.h"
#include "util/error.h"
#include "test-helpers.h"

/*
 * *errp must be set, its message one line that starts with "NAME: " and
 * contains given; frees it and clears *errp.
 */
static void check_error(Error **errp, const char *name, const char *given)
{
    g_autofree char *prefix = g_strdup_printf("%s: ", name);
    const char *msg;

    g_assert_nonnull(*errp);
    msg = error_get_pretty(*errp);
    g_test_message("%s", msg);
    g_assert_true(g_str_has_prefix(msg, prefix));
    g_assert_nonnull(strstr(msg, given));
    g_assert_null(strchr(msg, '\n'));
    g_clear_error(errp);
}

/*
 * The parsers under test behind one signature, so that one loop checks
 * what each accepts and refuses: parse str, naming name in errors, into
 * *out (which a refusal must leave alone).
 */
typedef bool ParseFn(const char *name, const char *str, uint64_t *out,
                     Error **errp);

typedef struct Good {
    const char *str;
    uint64_t value;
} Good;

/*
 * Every good[i] parses to its value; every bad[i] is refused, leaves *out
 * alone, and gets one message that names name and shows the string.
 */
static void check_parser(ParseFn *parse, const char *name, const Good *good,
                         size_t ngood, const char *const *bad, size_t nbad)
{
    for (size_t i = 0; i < ngood; i++) {
        uint64_t v = 12345;

        g_test_message("'%s'", good[i].str);
        g_assert_true(parse(name, good[i].str, &v, NULL));
        g_assert_cmpuint(v, ==, good[i].value);
    }
    for (size_t i = 0; i < nbad; i++) {
        uint64_t v = 12345;
        Error *err = NULL;

        g_test_message("'%s'", bad[i]);
        g_assert_false(parse(name, bad[i], &v, &err));
        g_assert_cmpuint(v, ==, 12345);
        check_error(&err, name, bad[i]);
    }
}

static bool parse_uint_any(const char *name, const char *str, uint64_t *out,
                           Error **errp)
{
    return cli_parse_uint(name, str, 0, UINT64_MAX, out, errp);
}

/* Numbers and seconds up to 1e6; a refusal leaves the double alone too. */
static bool parse_decimal(const char *name, const char *str, uint64_t *out,
                          Error **errp)
{
    double v = -1;
    bool ok = g_str_equal(name, "--runtime")
              ? cli_parse_seconds(name, str, 1e6, &v, errp)
              : cli_parse_number(name, str, 1e6, &v, errp);

    if (ok) {
        *out = v;
    } else {
        g_assert_cmpfloat(v, ==, -1);
    }
    return ok;
}

/* The number of CPUs in the list. */
static bool parse_cpu_count(const char *name, const char *str, uint64_t *out,
                            Error **errp)
{
    unsigned n = 77;
    g_autofree int *cpus = cpu_list_parse(name, str, &n, errp);

    if (cpus) {
        *out = n;
    } else {
        g_assert_cmpuint(n, ==, 77);
    }
    return cpus != NULL;
}

/* ------------------------------------------------------------------------ */
/* Integers and sizes                                                        */

static void test_uint(void)
{
    static const Good good[] = {
        { "0", 0 }, { "7", 7 }, { "010", 10 }, { "0x1f", 31 },
        { "0X10", 16 }, { "100", 100 },
        { "18446744073709551615", UINT64_MAX },
    };
    static const char *const bad[] = {
        "", " 1", "1 ", "-1", "+1", "1x", "0x", "0xg", "1.5", "abc",
        "18446744073709551616", "1k",
    };

    check_parser(parse_uint_any, "--n", good, G_N_ELEMENTS(good), bad,
                 G_N_ELEMENTS(bad));
}

static void test_uint_range(void)
{
    uint64_t v = 0;
    Error *err = NULL;

    g_assert_true(cli_parse_uint("--qd", "1", 1, 256, &v, NULL));
    g_assert_cmpuint(v, ==, 1);
    g_assert_true(cli_parse_uint("--qd", "256", 1, 256, &v, NULL));
    g_assert_cmpuint(v, ==, 256);
    g_assert_false(cli_parse_uint("--qd", "0", 1, 256, &v, &err));
    /* The message says the range. */
    g_assert_nonnull(strstr(error_get_pretty(err), "from 1 to 256"));
    check_error(&err, "--qd", "'0'");
    g_assert_false(cli_parse_uint("--qd", "257", 1, 256, &v, &err));
    check_error(&err, "--qd", "257");
    g_assert_false(cli_parse_uint("--qd", NULL, 1, 256, &v, &err));
    check_error(&err, "--qd", "''");
    g_assert_cmpuint(v, ==, 256);
}

static void test_size(void)
{
    static const Good good[] = {
        { "0", 0 }, { "4096", 4096 }, { "64k", 64 << 10 },
        { "64K", 64 << 10 }, { "2m", 2 << 20 }, { "2M", 2 << 20 },
        { "1g", 1ull << 30 }, { "1G", 1ull << 30 }, { "3T", 3ull << 40 },
        { "4KiB", 4 << 10 }, { "4KB", 4 << 10 }, { "4Ki", 4 << 10 },
        { "0x1000", 4096 }, { "0x10k", 16 << 10 },
        { "16777215T", UINT64_C(16777215) << 40 },
    };
    static const char *const bad[] = {
        "", "k", "-1", " 1", "1 ", "1x", "1kk", "1kib", "1KiBB", "1Bi", "1.5k",
        "16777216T", "18446744073709551616", "1P",
    };

    check_parser(cli_parse_size, "--bs", good, G_N_ELEMENTS(good), bad,
                 G_N_ELEMENTS(bad));
}

/* ------------------------------------------------------------------------ */
/* Numbers, durations, booleans, choices                                     */

static void test_number(void)
{
    static const struct {
        const char *str;
        double value;
    } good[] = {
        { "0", 0 }, { "1", 1 }, { "0.5", 0.5 }, { ".25", 0.25 },
        { "1e3", 1000 }, { "1000000", 1e6 },
    };
    static const char *const bad[] = {
        "", "-1", "-0", " 1", "1 ", "x", "1s", "inf", "nan", "0x10",
        "1000001", "1e7",
    };
    Error *err = NULL;
    double v;

    for (size_t i = 0; i < G_N_ELEMENTS(good); i++) {
        double s = -1;

        v = -1;
        g_test_message("'%s'", good[i].str);
        g_assert_true(cli_parse_number("--rate", good[i].str, 1e6, &v,
                                       NULL));
        g_assert_cmpfloat(v, ==, good[i].value);
        g_assert_true(cli_parse_seconds("--runtime", good[i].str, 1e6, &s,
                                        NULL));
        g_assert_cmpfloat(s, ==, good[i].value);
    }
    check_parser(parse_decimal, "--rate", NULL, 0, bad, G_N_ELEMENTS(bad));
    check_parser(parse_decimal, "--runtime", NULL, 0, bad,
                 G_N_ELEMENTS(bad));
    g_assert_false(cli_parse_seconds("--runtime", "x", 1e6, &v, &err));
    g_assert_nonnull(strstr(error_get_pretty(err), "seconds from 0 to"));
    check_error(&err, "--runtime", "'x'");
}

static void test_bool(void)
{
    static const char *const on[] = { "on", "yes", "true" };
    static const char *const off[] = { "off", "no", "false" };
    static const char *const bad[] = { "", "ON", "1", "0", "onn", "y" };
    Error *err = NULL;
    bool v;

    for (size_t i = 0; i < G_N_ELEMENTS(on); i++) {
        v = false;
        g_assert_true(cli_parse_bool("--x", on[i], &v, NULL));
        g_assert_true(v);
        g_assert_true(cli_parse_bool("--x", off[i], &v, NULL));
        g_assert_false(v);
    }
    for (size_t i = 0; i < G_N_ELEMENTS(bad); i++) {
        v = true;
        g_assert_false(cli_parse_bool("--x", bad[i], &v, &err));
        g_assert_true(v);
        check_error(&err, "--x", bad[i]);
    }
}

static void test_choice(void)
{
    static const char *const three[] = { "auto", "on", "off" };
    static const char *const two[] = { "blk", NULL, "scsi" };
    Error *err = NULL;
    int v = -1;

    g_assert_true(cli_parse_choice("--direct", "off", three, 3, &v, NULL));
    g_assert_cmpint(v, ==, 2);
    g_assert_true(cli_parse_choice("--direct", "auto", three, 3, &v, NULL));
    g_assert_cmpint(v, ==, 0);
    g_assert_false(cli_parse_choice("--direct", "maybe", three, 3, &v,
                                    &err));
    g_assert_cmpint(v, ==, 0);
    g_assert_cmpstr(error_get_pretty(err), ==,
                    "--direct: expected auto, on or off, got 'maybe'");
    g_clear_error(&err);

    /* A NULL entry is no choice, and not listed. */
    g_assert_true(cli_parse_choice("--device", "scsi", two, 3, &v, NULL));
    g_assert_cmpint(v, ==, 2);
    g_assert_false(cli_parse_choice("--device", "", two, 3, &v, &err));
    g_assert_cmpstr(error_get_pretty(err), ==,
                    "--device: expected blk or scsi, got ''");
    g_clear_error(&err);
    g_assert_false(cli_parse_choice("--device", NULL, two, 3, &v, &err));
    check_error(&err, "--device", "''");
}

/* ------------------------------------------------------------------------ */
/* The command line                                                          */

/* Run cli_parse_argv() on "prog ARGS..." (NULL-terminated). */
static bool parse_argv(char **str, Error **errp, ...)
{
    GOptionEntry entries[] = {
        { "str", 0, 0, G_OPTION_ARG_STRING, str, "a string", "S" },
        { NULL }
    };
    g_autoptr(GOptionContext) ctx = g_option_context_new(NULL);
    g_autoptr(GPtrArray) argv = g_ptr_array_new();
    const char *a;
    va_list ap;

    g_ptr_array_add(argv, (char *)"prog");
    va_start(ap, errp);
    while ((a = va_arg(ap, const char *))) {
        g_ptr_array_add(argv, (char *)a);
    }
    va_end(ap);
    g_option_context_add_main_entries(ctx, entries, NULL);
    /* GOption rearranges the vector it is given, not the strings. */
    return cli_parse_argv(ctx, argv->len, (char **)argv->pdata, errp);
}

static void test_argv(void)
{
    g_autofree char *str = NULL;
    Error *err = NULL;

    g_assert_true(parse_argv(&str, NULL, "--str=a", NULL));
    g_assert_cmpstr(str, ==, "a");
    g_clear_pointer(&str, g_free);

    g_assert_false(parse_argv(&str, &err, "--str=a", "stray", NULL));
    g_assert_cmpstr(error_get_pretty(err), ==, "unexpected argument 'stray'");
    g_clear_error(&err);
    g_clear_pointer(&str, g_free);

    /* GOption's own errors pass through. */
    g_assert_false(parse_argv(&str, &err, "--nonsense", NULL));
    g_assert_nonnull(strstr(error_get_pretty(err), "--nonsense"));
    g_clear_error(&err);
}

/* ------------------------------------------------------------------------ */
/* CPU lists                                                                 */

static void test_cpu_list_parse(void)
{
    static const struct {
        const char *str;
        int cpus[8];
        unsigned n;
    } good[] = {
        { "0", { 0 }, 1 },
        { "3,1", { 3, 1 }, 2 },
        { "0-3", { 0, 1, 2, 3 }, 4 },
        { "0-1,4,6-7", { 0, 1, 4, 6, 7 }, 5 },
        { "2-2", { 2 }, 1 },
        { "1,1", { 1, 1 }, 2 },
        { "0x2", { 2 }, 1 },
    };
    static const char *const bad[] = {
        "", ",", "1,", ",1", "1,,2", "-1", "1-", "3-1", "1-2-3", "a",
        "1 ", " 1", "0:1", "99999", "0-99999",
    };

    for (size_t i = 0; i < G_N_ELEMENTS(good); i++) {
        unsigned n = 0;
        g_autofree int *cpus = NULL;

        g_test_message("'%s'", good[i].str);
        cpus = cpu_list_parse("--cpus", good[i].str, &n, NULL);
        g_assert_nonnull(cpus);
        g_assert_cmpuint(n, ==, good[i].n);
        g_assert_cmpmem(cpus, n * sizeof(int), good[i].cpus,
                        good[i].n * sizeof(int));
    }
    check_parser(parse_cpu_count, "--cpus", NULL, 0, bad, G_N_ELEMENTS(bad));
}

static void test_cpu_list_allowed(void)
{
    cpu_set_t mask;
    g_autofree char *list = NULL;
    g_autofree int *cpus = NULL;
    int outside = -1;
    unsigned n;
    Error *err = NULL;

    g_assert_cmpint(sched_getaffinity(0, sizeof(mask), &mask), ==, 0);
    /* Our own mask, written out and read back, is allowed. */
    list = cpu_list_format(&mask);
    cpus = cpu_list_parse("--cpus", list, &n, NULL);
    g_assert_nonnull(cpus);
    g_assert_cmpuint(n, ==, CPU_COUNT(&mask));
    g_assert_true(cpu_list_check_allowed("--cpus", cpus, n, NULL));

    for (int c = 0; c < CPU_SETSIZE && outside < 0; c++) {
        if (!CPU_ISSET(c, &mask)) {
            outside = c;
        }
    }
    g_assert_cmpint(outside, >=, 0);
    g_assert_false(cpu_list_check_allowed("--cpus", &outside, 1, &err));
    g_assert_nonnull(strstr(error_get_pretty(err), list));
    check_error(&err, "--cpus", "affinity mask");
}

static void test_cpu_list_format(void)
{
    static const struct {
        int cpus[8];
        unsigned n;
        const char *str;
    } cases[] = {
        { { 0 }, 0, "" },
        { { 5 }, 1, "5" },
        { { 0, 1 }, 2, "0,1" },
        { { 0, 1, 2, 3 }, 4, "0-3" },
        { { 0, 1, 2, 4, 5, 7 }, 6, "0-2,4,5,7" },
        { { 1020, 1021, 1022, 1023 }, 4, "1020-1023" },
    };

    for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
        g_autofree char *s = NULL;
        cpu_set_t set;

        CPU_ZERO(&set);
        for (unsigned k = 0; k < cases[i].n; k++) {
            CPU_SET(cases[i].cpus[k], &set);
        }
        s = cpu_list_format(&set);
        g_assert_cmpstr(s, ==, cases[i].str);
    }
}

/* ------------------------------------------------------------------------ */
/* Byte order                                                                */

static void test_bswap(void)
{
    /* One byte in front, so that every field is misaligned. */
    static const uint8_t pattern[9] = {
        0xee, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08,
    };
    const uint8_t *p = pattern + 1;
    uint8_t le[9], be[9];

    g_assert_cmphex(ld_le16(p), ==, 0x0201);
    g_assert_cmphex(ld_le32(p), ==, 0x04030201);
    g_assert_cmphex(ld_le64(p), ==, UINT64_C(0x0807060504030201));
    g_assert_cmphex(ld_be16(p), ==, 0x0102);
    g_assert_cmphex(ld_be24(p), ==, 0x010203);
    g_assert_cmphex(ld_be32(p), ==, 0x01020304);
    g_assert_cmphex(ld_be64(p), ==, UINT64_C(0x0102030405060708));

    /* Whole words, then pieces of every size: the same bytes back. */
    le[0] = be[0] = 0xee;
    st_le64(le + 1, UINT64_C(0x0807060504030201));
    st_be64(be + 1, UINT64_C(0x0102030405060708));
    g_assert_cmpmem(le, sizeof(le), pattern, sizeof(pattern));
    g_assert_cmpmem(be, sizeof(be), pattern, sizeof(pattern));
    memset(le + 1, 0, 8);
    memset(be + 1, 0, 8);
    st_le32(le + 1, 0x04030201);
    st_le16(le + 5, 0x0605);
    st_le16(le + 7, 0x0807);
    st_be24(be + 1, 0x010203);
    st_be16(be + 4, 0x0405);
    st_be32(be + 5, 0x05060708);        /* overlaps the 0x05: the same */
    g_assert_cmpmem(le, sizeof(le), pattern, sizeof(pattern));
    g_assert_cmpmem(be, sizeof(be), pattern, sizeof(pattern));
}

static const TestCase tests[] = {
    { "/cli-helpers/uint", test_uint },
    { "/cli-helpers/uint/range", test_uint_range },
    { "/cli-helpers/size", test_size },
    { "/cli-helpers/number", test_number },
    { "/cli-helpers/bool", test_bool },
    { "/cli-helpers/choice", test_choice },
    { "/cli-helpers/argv", test_argv },
    { "/cli-helpers/cpu-list/parse", test_cpu_list_parse },
    { "/cli-helpers/cpu-list/allowed", test_cpu_list_allowed },
    { "/cli-helpers/cpu-list/format", test_cpu_list_format },
    { "/cli-helpers/bswap", test_bswap },
};

TEST_MAIN(tests, 25)
