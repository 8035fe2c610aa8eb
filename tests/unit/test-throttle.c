/*
 * Unit tests of util/throttle.c (the leaky buckets, driven by a fake
 * clock), util/throttle-group.c (the throttle-group object: options,
 * their errors, live changes) and block/throttle.c (the filter: order,
 * rate, flushes, a live change rescheduling waiting requests).
 *
 * The bucket tests play a closed loop: a client that starts a request as
 * soon as the state says it may (throttle_wait_ns() == 0), and otherwise
 * moves the fake clock to when it may.  Counting what started in a
 * window then gives the rates a real throttled queue would see.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <string.h>
#include <glib.h>

#include "block-test-helpers.h"
#include "test-helpers.h"
#include "util/clock.h"
#include "util/object.h"
#include "util/throttle.h"
#include "util/throttle-group.h"

/* A client of ts that starts requests of bytes as fast as allowed. */
typedef struct Client {
    ThrottleState *ts;
    int64_t now;
    bool is_write;
    uint64_t bytes;
} Client;

/* How many requests start from now until now + ns. */
static int64_t client_run_for(Client *c, int64_t ns)
{
    int64_t end = c->now + ns, n = 0;

    for (;;) {
        int64_t wait = throttle_wait_ns(c->ts, c->is_write, c->now);

        if (c->now + wait >= end) {
            c->now = end;
            return n;
        }
        c->now += wait;
        throttle_account(c->ts, c->is_write, c->bytes);
        n++;
    }
}

static void config_set(ThrottleConfig *cfg, const char *name, int64_t v)
{
    const ThrottleParam *p = throttle_param_find(name);

    g_assert_nonnull(p);
    g_assert_true(throttle_param_set(cfg, p, "x-", v, NULL));
}

/* cfg from spec: names of throttle_params and their values, such as
 * "iops-total=100,iops-total-max=1000" (each value in its own range). */
static void config_parse(ThrottleConfig *cfg, const char *spec)
{
    g_auto(GStrv) items = g_strsplit(spec, ",", -1);

    throttle_config_init(cfg);
    for (int i = 0; items[i]; i++) {
        g_auto(GStrv) kv = g_strsplit(items[i], "=", 2);

        config_set(cfg, kv[0], g_ascii_strtoll(kv[1], NULL, 10));
    }
}

/* ts at time 0 with the limits of spec (config_parse()), which are valid;
 * the config in *cfg. */
static void state_init(ThrottleState *ts, ThrottleConfig *cfg,
                       const char *spec)
{
    config_parse(cfg, spec);
    g_assert_true(throttle_config_check(cfg, "x-", NULL));
    throttle_state_init(ts, cfg, 0);
}

static void assert_near(double got, double want, double tolerance)
{
    if (fabs(got - want) > tolerance * want) {
        g_error("got %.1f, expected %.1f within %.0f%%", got, want,
                tolerance * 100);
    }
}

/* One limit per row: a client of the given direction and size sees it. */
typedef struct RateCase {
    const char *param;
    int64_t limit;
    bool is_write;
    uint64_t bytes;
    bool count_bytes;            /* compare bytes (else requests) per s */
} RateCase;

static const RateCase rate_cases[] = {
    { "iops-total", 1000, false, 4096, false },
    { "iops-read", 500, false, 4096, false },
    { "iops-write", 2000, true, 512, false },
    { "bps-total", 10 * 1024 * 1024, true, 65536, true },
    { "bps-read", 1024 * 1024, false, 4096, true },
    { "bps-write", 4 * 1024 * 1024, true, 131072, true },
};

/* Over 10 s the average rate is the limit (the initial bucket of a tenth
 * of a second is the only excess). */
static void test_average_rate(const void *data)
{
    const RateCase *rc = data;
    ThrottleConfig cfg;
    ThrottleState ts;
    Client c = { .ts = &ts, .is_write = rc->is_write, .bytes = rc->bytes };
    g_autofree char *spec = g_strdup_printf("%s=%" PRId64, rc->param,
                                            rc->limit);
    double n, rate;

    state_init(&ts, &cfg, spec);
    n = client_run_for(&c, 10 * NS_PER_SEC);
    rate = (rc->count_bytes ? n * rc->bytes : n) / 10.0;
    assert_near(rate, rc->limit, 0.02);
}


/* A read limit leaves writes alone, and the other way round. */
static void test_direction(void)
{
    ThrottleConfig cfg;
    ThrottleState ts;

    state_init(&ts, &cfg, "iops-read=10");
    g_assert_true(throttle_config_limits(&cfg, false));
    g_assert_false(throttle_config_limits(&cfg, true));
    for (int i = 0; i < 1000; i++) {
        g_assert_cmpint(throttle_wait_ns(&ts, true, 0), ==, 0);
        throttle_account(&ts, true, 4096);
    }
    /* Writes filled nothing that reads wait for... */
    g_assert_cmpint(throttle_wait_ns(&ts, false, 0), ==, 0);
    /* ... and a total limit counts both. */
    state_init(&ts, &cfg, "iops-total=10");
    g_assert_true(throttle_config_limits(&cfg, true));
    for (int i = 0; i < 5; i++) {
        throttle_account(&ts, true, 4096);
    }
    g_assert_cmpint(throttle_wait_ns(&ts, false, 0), >, 0);
}

/*
 * A burst: with max and max-length, max * max-length requests go at the
 * burst rate (not faster), then the average takes over.
 */
static void test_burst(void)
{
    ThrottleConfig cfg;
    ThrottleState ts;
    Client c = { .ts = &ts, .bytes = 4096 };
    int64_t n;

    state_init(&ts, &cfg, "iops-total=100,iops-total-max=1000,"
               "iops-total-max-length=4");

    /* The first second runs at max (the burst level caps it)... */
    n = client_run_for(&c, NS_PER_SEC);
    assert_near(n, 1000, 0.15);
    /* ... the burst lasts until max * max-length (4000 units, drained at
     * 100/s meanwhile) are in: about 4.4 s at 1000/s ... */
    n += client_run_for(&c, 3 * NS_PER_SEC);
    assert_near(n, 4000, 0.15);
    /* ... then 100/s. */
    client_run_for(&c, 2 * NS_PER_SEC);
    n = client_run_for(&c, 10 * NS_PER_SEC);
    assert_near(n, 1000, 0.05);

    /* After a rest long enough to drain the bucket, the burst again. */
    c.now += 60 * NS_PER_SEC;
    n = client_run_for(&c, NS_PER_SEC);
    assert_near(n, 1000, 0.15);
}

/* max without max-length: max units at once, then the average. */
static void test_burst_one_second(void)
{
    ThrottleConfig cfg;
    ThrottleState ts;
    Client c = { .ts = &ts, .bytes = 4096 };

    state_init(&ts, &cfg, "iops-total=10,iops-total-max=50");
    /* 50 at once: the bucket holds 50 before anything waits. */
    for (int i = 0; i < 51; i++) {
        g_assert_cmpint(throttle_wait_ns(&ts, false, 0), ==, 0);
        throttle_account(&ts, false, 4096);
    }
    g_assert_cmpint(throttle_wait_ns(&ts, false, 0), >, 0);
    c.now = 0;
    assert_near(client_run_for(&c, 10 * NS_PER_SEC), 100, 0.05);
}

/* x-iops-size: a request of 4 * size counts as 4 operations. */
static void test_iops_size(void)
{
    ThrottleConfig cfg;
    ThrottleState ts;
    Client c = { .ts = &ts, .bytes = 4 * 4096 };

    state_init(&ts, &cfg, "iops-total=400,iops-size=4096");
    assert_near(client_run_for(&c, 10 * NS_PER_SEC) / 10.0, 100, 0.02);
    /* Smaller requests count as one. */
    c.bytes = 512;
    client_run_for(&c, NS_PER_SEC);
    assert_near(client_run_for(&c, 10 * NS_PER_SEC) / 10.0, 400, 0.02);
}

/* Read and write limits with a total: each direction keeps its own
 * limit, and the total caps the sum. */
static void test_read_write_total(void)
{
    ThrottleConfig cfg;
    ThrottleState ts;
    int64_t now = 0, n[2] = { 0, 0 };

    state_init(&ts, &cfg, "iops-read=300,bps-total=1638400");
    /* A reader and a writer, both always ready: whichever may start
     * first goes (the reader on a tie). */
    for (;;) {
        int64_t wait_r = throttle_wait_ns(&ts, false, now);
        int64_t wait_w = throttle_wait_ns(&ts, true, now);
        bool is_write = wait_w < wait_r;

        now += MIN(wait_r, wait_w);
        if (now >= 10 * NS_PER_SEC) {
            break;
        }
        throttle_account(&ts, is_write, 4096);
        n[is_write]++;
    }
    assert_near((n[0] + n[1]) / 10.0, 400, 0.03);
    assert_near(n[0] / 10.0, 300, 0.03);
}

/* A new config takes effect at once: the buckets start again empty. */
static void test_change_live(void)
{
    ThrottleConfig cfg;
    ThrottleState ts;
    Client c = { .ts = &ts, .bytes = 4096 };

    state_init(&ts, &cfg, "iops-total=100");
    assert_near(client_run_for(&c, 10 * NS_PER_SEC), 1000, 0.02);
    config_set(&cfg, "iops-total", 1000);
    throttle_state_init(&ts, &cfg, c.now);
    assert_near(client_run_for(&c, 10 * NS_PER_SEC), 10000, 0.02);
    config_set(&cfg, "iops-total", 0);
    throttle_state_init(&ts, &cfg, c.now);
    g_assert_false(throttle_config_limits(&cfg, false));
    g_assert_cmpint(throttle_wait_ns(&ts, false, c.now), ==, 0);
}

/* A bad value or combination: the message names the property. */
/* A bad combination (a config_parse() spec): the message names it. */
static const char *const bad_configs[][2] = {
    { "iops-total=10,iops-read=5",
      "Parameters 'x-iops-total' and 'x-iops-read' cannot be used" },
    { "bps-total=10,bps-write=5",
      "Parameters 'x-bps-total' and 'x-bps-write' cannot be used" },
    { "iops-total=10,iops-write=5,iops-total-max=20",
      "Parameters 'x-iops-total' and 'x-iops-write' cannot be used" },
    { "iops-read-max=10", "Parameter 'x-iops-read-max' needs 'x-iops-read'" },
    { "bps-total=100,bps-total-max=10",
      "Parameter 'x-bps-total-max' (10) cannot be lower than "
      "'x-bps-total' (100)" },
    { "iops-write=100,iops-write-max-length=5",
      "Parameter 'x-iops-write-max-length' needs 'x-iops-write-max'" },
};

/* msg contains want; else fail, showing both. */
static void assert_contains(const char *msg, const char *want)
{
    if (!strstr(msg, want)) {
        g_error("'%s' does not contain '%s'", msg, want);
    }
}

static void test_bad_config(void)
{
    for (size_t i = 0; i < G_N_ELEMENTS(bad_configs); i++) {
        ThrottleConfig cfg;
        Error *err = NULL;

        config_parse(&cfg, bad_configs[i][0]);
        g_assert_false(throttle_config_check(&cfg, "x-", &err));
        assert_contains(error_get_pretty(err), bad_configs[i][1]);
        error_free(err);
    }
}

/* Out-of-range values (name=value), each named in the message. */
static void test_bad_value(void)
{
    static const char *const bad[] = {
        "iops-total=-1", "bps-read=1000000000000001", "iops-total-max=-5",
        "bps-write-max-length=0", "iops-read-max-length=4294967296",
        "iops-size=-1",
    };
    ThrottleConfig cfg;

    throttle_config_init(&cfg);
    for (size_t i = 0; i < G_N_ELEMENTS(bad); i++) {
        g_auto(GStrv) kv = g_strsplit(bad[i], "=", 2);
        g_autofree char *want = g_strdup_printf("Parameter 'limits.%s' "
                                                "expects a value from",
                                                kv[0]);
        Error *err = NULL;

        g_assert_false(throttle_param_set(&cfg, throttle_param_find(kv[0]),
                                          "limits.",
                                          g_ascii_strtoll(kv[1], NULL, 10),
                                          &err));
        assert_contains(error_get_pretty(err), want);
        error_free(err);
    }
    /* Nothing was changed. */
    for (int i = 0; i < THROTTLE_BUCKETS; i++) {
        g_assert_cmpint(cfg.limit[i].avg, ==, 0);
        g_assert_cmpint(cfg.limit[i].max_length, ==, 1);
    }
}

/* ------------------------------------------------------------------------ */
/* The throttle-group object                                                 */

/* Create a group from --object text; NULL with the message in *msg. */
static ThrottleGroup *group_from_option(const char *arg, char **msg)
{
    g_autoptr(Opts) opts = NULL;
    Error *err = NULL;
    ThrottleGroup *tg = NULL;

    if (object_create_from_option(arg, &err)) {
        opts = opts_parse(arg, "qom-type", NULL);
        g_assert_nonnull(opts);
        g_assert_true(opts_get_str(opts, "id", NULL, (const char **)msg,
                                   NULL));
        tg = throttle_group_lookup(*msg);
        *msg = NULL;
        g_assert_nonnull(tg);
    } else {
        *msg = g_strdup(error_get_pretty(err));
        error_free(err);
    }
    return tg;
}

static void group_destroy(ThrottleGroup *tg)
{
    g_assert_true(throttle_group_destroy(tg, NULL));
}

static int64_t group_get_int(ThrottleGroup *tg, const char *name)
{
    g_autoptr(JsonNode) v = throttle_group_get(tg, name, NULL);

    g_assert_nonnull(v);
    return json_node_get_int(v);
}

/* Both spellings of --object give the same limits. */
static void test_group_options(void)
{
    static const char *const forms[] = {
        "throttle-group,id=tg,x-iops-total=100,x-iops-total-max=200,"
        "x-iops-total-max-length=3,x-bps-read=4096,x-iops-size=8192",
        "throttle-group,id=tg,limits.iops-total=100,limits.iops-total-max="
        "200,limits.iops-total-max-length=3,limits.bps-read=4096,"
        "limits.iops-size=8192",
        "{\"qom-type\": \"throttle-group\", \"id\": \"tg\", \"limits\": "
        "{\"iops-total\": 100, \"iops-total-max\": 200, "
        "\"iops-total-max-length\": 3, \"bps-read\": 4096}, "
        "\"x-iops-size\": 8192}",
    };

    for (size_t i = 0; i < G_N_ELEMENTS(forms); i++) {
        g_autofree char *msg = NULL;
        ThrottleGroup *tg = group_from_option(forms[i], &msg);
        ThrottleConfig cfg;

        g_assert_null(msg);
        throttle_group_get_config(tg, &cfg);
        g_assert_cmpint(cfg.limit[THROTTLE_IOPS_TOTAL].avg, ==, 100);
        g_assert_cmpint(cfg.limit[THROTTLE_IOPS_TOTAL].max, ==, 200);
        g_assert_cmpint(cfg.limit[THROTTLE_IOPS_TOTAL].max_length, ==, 3);
        g_assert_cmpint(cfg.limit[THROTTLE_BPS_READ].avg, ==, 4096);
        g_assert_cmpint(cfg.op_size, ==, 8192);
        g_assert_true(atomic_load(&tg->limited[0]));
        g_assert_true(atomic_load(&tg->limited[1]));
        group_destroy(tg);
    }
}

/* Bad options: one message naming the property; nothing is created. */
static void test_group_bad_options(void)
{
    static const char *const bad[][2] = {
        { "throttle-group,x-iops-total=1", "Parameter 'id' is missing" },
        { "throttle-group,id=a b", "Parameter 'id' expects an identifier" },
        { "throttle-group,id=tg,x-iops-total=x",
          "Parameter 'x-iops-total' expects an integer" },
        { "throttle-group,id=tg,x-bps-read=-1",
          "Parameter 'x-bps-read' expects a value from 0" },
        { "throttle-group,id=tg,x-iops-read=1,x-iops-total=1",
          "Parameters 'x-iops-total' and 'x-iops-read' cannot be used" },
        { "throttle-group,id=tg,limits.bps-write-max=10",
          "Parameter 'limits.bps-write-max' needs 'limits.bps-write'" },
        { "throttle-group,id=tg,limits=5",
          "Parameter 'limits' expects an object" },
        { "throttle-group,id=tg,limits.iops=5",
          "Invalid parameter 'limits.iops'" },
        { "throttle-group,id=tg,poll-max-ns=5",
          "Invalid parameter 'poll-max-ns'" },
        { "throttle-grp,id=tg", "Object type 'throttle-grp' is not "
          "supported (Spindle has: iothread, throttle-group)" },
    };

    for (size_t i = 0; i < G_N_ELEMENTS(bad); i++) {
        g_autofree char *msg = NULL;

        g_assert_null(group_from_option(bad[i][0], &msg));
        assert_contains(msg, bad[i][1]);
        g_assert_null(throttle_group_lookup("tg"));
    }
}

/* qom-set of limits changes the members given; of x-: that one. */
static void test_group_set_get(void)
{
    g_autofree char *msg = NULL;
    ThrottleGroup *tg = group_from_option(
        "throttle-group,id=tg,x-iops-total=100,x-bps-write=1000", &msg);
    g_autoptr(JsonNode) limits = json_from_string(
        "{\"iops-total\": 0, \"iops-read\": 50, \"iops-write\": 70}", NULL);
    g_autoptr(JsonNode) bad = json_from_string("{\"iops-total\": 10}", NULL);
    g_autoptr(JsonNode) five = json_from_string("5", NULL);
    g_autoptr(JsonNode) got = NULL;
    Error *err = NULL;

    g_assert_true(throttle_group_set(tg, "limits", limits, NULL));
    g_assert_cmpint(group_get_int(tg, "x-iops-total"), ==, 0);
    g_assert_cmpint(group_get_int(tg, "x-iops-read"), ==, 50);
    g_assert_cmpint(group_get_int(tg, "x-iops-write"), ==, 70);
    g_assert_cmpint(group_get_int(tg, "x-bps-write"), ==, 1000);
    g_assert_true(throttle_group_set(tg, "x-iops-size", five, NULL));
    g_assert_cmpint(group_get_int(tg, "x-iops-size"), ==, 5);

    /* A bad change leaves everything as it was. */
    g_assert_false(throttle_group_set(tg, "limits", bad, &err));
    g_assert_nonnull(strstr(error_get_pretty(err), "Parameters "
                            "'limits.iops-total' and 'limits.iops-read'"));
    g_clear_pointer(&err, error_free);
    g_assert_cmpint(group_get_int(tg, "x-iops-total"), ==, 0);
    g_assert_false(throttle_group_set(tg, "iops-total", five, &err));
    g_assert_nonnull(strstr(error_get_pretty(err),
                            "Property 'throttle-group.iops-total' not found"));
    g_clear_pointer(&err, error_free);

    /* limits shows every member, QEMU's ThrottleLimits. */
    got = throttle_group_get(tg, "limits", NULL);
    g_assert_cmpint(json_object_get_size(json_node_get_object(got)), ==, 19);
    g_assert_cmpint(json_object_get_int_member(json_node_get_object(got),
                                               "bps-write-max-length"), ==, 1);
    group_destroy(tg);
}

/* A group in use cannot go; ids are unique across object types. */
static void test_group_users_and_ids(void)
{
    g_autofree char *msg = NULL;
    ThrottleGroup *tg = group_from_option("throttle-group,id=tg", &msg);
    Error *err = NULL;

    g_assert_false(atomic_load(&tg->limited[0]));
    throttle_group_add_user(tg);
    g_assert_false(throttle_group_destroy(tg, &err));
    g_assert_cmpstr(error_get_pretty(err), ==,
                    "throttle-group 'tg' is in use by 1 throttle node");
    g_clear_pointer(&err, error_free);
    throttle_group_destroy_all();
    g_assert_true(throttle_group_lookup("tg") == tg);
    throttle_group_remove_user(tg);

    g_assert_false(object_create_from_option("iothread,id=tg", &err));
    g_assert_cmpstr(error_get_pretty(err), ==,
                    "iothread: id 'tg' is already the id of a throttle-group");
    g_clear_pointer(&err, error_free);
    g_assert_false(object_create_from_option("throttle-group,id=tg", &err));
    g_assert_nonnull(strstr(error_get_pretty(err), "already exists"));
    g_clear_pointer(&err, error_free);
    g_assert_true(object_id_taken("tg"));
    throttle_group_destroy_all();
    g_assert_null(throttle_group_lookup("tg"));
    g_assert_false(object_id_taken("tg"));
}

static void test_group_help(void)
{
    g_autofree char *types = object_option_help("help");
    g_autofree char *props = object_option_help("throttle-group,help");
    g_autofree char *keyed = object_option_help("qom-type=throttle-group,"
                                                "help");

    g_assert_cmpstr(types, ==, "Available object types:\n  iothread\n"
                    "  throttle-group\n");
    g_assert_nonnull(strstr(props, "x-bps-write-max-length=<int>"));
    g_assert_cmpstr(props, ==, keyed);
    g_assert_null(object_option_help("throttle-group,id=x"));
}

/* ------------------------------------------------------------------------ */
/* The throttle filter                                                       */

#define THROTTLE_NULL "driver=throttle,throttle-group=tg,file.driver=null-co," \
                      "file.size=1M"

/*
 * 30 reads at 100 IOPS: the first ten go at once (the bucket holds a
 * tenth of a second), the others one every 10 ms, in submission order;
 * a flush submitted behind them is not held.
 */
static void node_order_and_rate(AioContext *ctx, BlockNode *bs)
{
    char buf[512];
    TReq r[30], flush;
    int64_t start = clock_now_ns(), elapsed;

    for (int i = 0; i < 30; i++) {
        treq_init(&r[i], BLOCK_OP_READ, i * 512, buf, 512);
        treq_submit(bs, &r[i]);
    }
    treq_init(&flush, BLOCK_OP_FLUSH, 0, NULL, 0);
    treq_submit(bs, &flush);
    block_node_drain(bs);
    elapsed = clock_now_ns() - start;
    for (int i = 0; i < 30; i++) {
        g_assert_true(r[i].done);
        g_assert_cmpint(r[i].ret, ==, 0);
        if (i > 0) {
            g_assert_cmpuint(r[i].seq, >, r[i - 1].seq);
        }
    }
    g_assert_cmpuint(flush.seq, <, r[29].seq);
    /* 19 after the bucket's 11, at 10 ms each; generous upper bound for
     * a loaded machine (timers only ever fire late). */
    g_assert_cmpint(elapsed, >=, 180 * NS_PER_MS);
    g_assert_cmpint(elapsed, <, 5 * NS_PER_SEC);
}

/* A group without limits passes everything at once. */
static void node_no_limits(AioContext *ctx, BlockNode *bs)
{
    static const BlockOp ops[] = {
        BLOCK_OP_READ, BLOCK_OP_WRITE, BLOCK_OP_WRITE_ZEROES,
        BLOCK_OP_DISCARD, BLOCK_OP_FLUSH,
    };
    char buf[512] = { 0 };

    for (int i = 0; i < 1000; i++) {
        BlockOp op = ops[i % G_N_ELEMENTS(ops)];
        int64_t bytes = op == BLOCK_OP_FLUSH ? 0 : 512;

        g_assert_cmpint(run_op(bs, op, 0, op == BLOCK_OP_READ ||
                               op == BLOCK_OP_WRITE ? buf : NULL, bytes),
                        ==, 0);
    }
}

/*
 * Requests waiting for a slow limit go as soon as qom-set lifts it: the
 * first queue of the ring is woken and looks again at once.  Writes only
 * limited: reads pass the waiting writes.
 */
static void node_change_reschedules(AioContext *ctx, BlockNode *bs)
{
    g_autoptr(JsonNode) lift = json_from_string("{\"iops-write\": 0}", NULL);
    char buf[512] = { 0 };
    TReq w[3], rd;
    int64_t start;

    for (int i = 0; i < 3; i++) {
        treq_init(&w[i], BLOCK_OP_WRITE, 0, buf, 512);
        treq_submit(bs, &w[i]);
    }
    treq_init(&rd, BLOCK_OP_READ, 0, buf, 512);
    treq_submit(bs, &rd);
    /* (No drain: it would wait for the writes.)  The first write went (it
     * fits the empty bucket), the read too; the next write waits a
     * second. */
    start = clock_now_ns();
    while (!w[0].done || !rd.done ||
           clock_now_ns() - start < 50 * NS_PER_MS) {
        aio_poll(ctx, false);
    }
    g_assert_cmpint(rd.ret, ==, 0);
    g_assert_false(w[1].done);

    g_assert_true(throttle_group_set(throttle_group_lookup("tg"), "limits",
                                     lift, NULL));
    start = clock_now_ns();
    block_node_drain(bs);
    g_assert_true(w[1].done && w[2].done);
    g_assert_cmpint(clock_now_ns() - start, <, 500 * NS_PER_MS);
}

/* A throttle node over null-co in a group tg made from group's text. */
typedef struct NodeCase {
    const char *group;
    void (*body)(AioContext *ctx, BlockNode *bs);
} NodeCase;

static const NodeCase node_cases[] = {
    { "throttle-group,id=tg,x-iops-total=100", node_order_and_rate },
    { "throttle-group,id=tg", node_no_limits },
    { "throttle-group,id=tg,x-iops-write=1", node_change_reschedules },
};

static void test_node(const void *data)
{
    const NodeCase *nc = data;
    AioContext *ctx = ctx_new();
    g_autofree char *msg = NULL;
    ThrottleGroup *tg = group_from_option(nc->group, &msg);
    BlockNode *bs = open_ok(THROTTLE_NULL, ctx);
    Error *err = NULL;

    g_assert_nonnull(tg);
    nc->body(ctx, bs);
    /* In use: object-del is refused. */
    g_assert_false(throttle_group_destroy(tg, &err));
    error_free(err);
    block_node_unref(bs);
    group_destroy(tg);
    aio_context_unref(ctx);
}

static void test_node_open_errors(void)
{
    AioContext *ctx = ctx_new();

    open_fails("driver=throttle,file.driver=null-co", ctx,
               "Parameter 'throttle-group' is missing");
    open_fails(THROTTLE_NULL, ctx, "no throttle-group 'tg'");
    g_assert_true(object_create_from_option("throttle-group,id=tg", NULL));
    open_fails("driver=throttle,throttle-group=tg", ctx, "'file'");
    /* A failed open does not count as a user. */
    group_destroy(throttle_group_lookup("tg"));
    aio_context_unref(ctx);
}

static const TestCase tests[] = {
    { "/throttle/rate/iops-total", NULL, test_average_rate, &rate_cases[0] },
    { "/throttle/rate/iops-read", NULL, test_average_rate, &rate_cases[1] },
    { "/throttle/rate/iops-write", NULL, test_average_rate, &rate_cases[2] },
    { "/throttle/rate/bps-total", NULL, test_average_rate, &rate_cases[3] },
    { "/throttle/rate/bps-read", NULL, test_average_rate, &rate_cases[4] },
    { "/throttle/rate/bps-write", NULL, test_average_rate, &rate_cases[5] },
    { "/throttle/direction", test_direction },
    { "/throttle/burst/long", test_burst },
    { "/throttle/burst/one-second", test_burst_one_second },
    { "/throttle/iops-size", test_iops_size },
    { "/throttle/read-write-total", test_read_write_total },
    { "/throttle/change-live", test_change_live },
    { "/throttle/config/bad-combination", test_bad_config },
    { "/throttle/config/bad-value", test_bad_value },
    { "/throttle/group/options", test_group_options },
    { "/throttle/group/bad-options", test_group_bad_options },
    { "/throttle/group/set-get", test_group_set_get },
    { "/throttle/group/users-and-ids", test_group_users_and_ids },
    { "/throttle/group/help", test_group_help },
    { "/throttle/node/order-and-rate", NULL, test_node, &node_cases[0] },
    { "/throttle/node/no-limits", NULL, test_node, &node_cases[1] },
    { "/throttle/node/change-reschedules", NULL, test_node, &node_cases[2] },
    { "/throttle/node/open-errors", test_node_open_errors },
};

/* Below the 30 s meson timeout, so that the watchdog reports first. */
TEST_MAIN(tests, 25)
