/*
 * Unit tests for spindle-bench's own modules (tools/bench/bench.h): the
 * latency histogram, the self-checking sector format of --verify, and the
 * per-thread CPU accounting read from /proc.
 *
 * Theory of operation: the histogram tests feed known samples (small exact
 * values, or 100k values drawn log-uniformly from 1 ns to 1 s with a fixed
 * seed) and compare every answer with the one computed exactly from the
 * sorted samples.  Percentiles are named in thousandths of a percent so
 * that the exact rank, ceil(p/100 * n), is computed in integers and does
 * not share the floating-point rounding of the code under test.  The
 * verify tests write sectors with verify_fill(), damage them in known
 * ways and check that verify_check() names exactly the damage and where
 * it is; one test pins the on-disk header byte by byte.  The CPU tests
 * measure this very process: a thread that burns a known amount of CPU
 * (by its own CLOCK_THREAD_CPUTIME_ID, or by getrusage() where that clock
 * is what is under test) must show up in the snapshots; the bounds are
 * generous because tick-based accounting is coarse and the machine may be
 * busy.  The option tests run the command-line parser (bench-opts.c) on
 * argument vectors: --phase specs that parse, specs that do not, and the
 * options --phase excludes; each failure must name --phase.
 */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <glib.h>

#include "util/error.h"
#include "bench.h"
#include "bench-int.h"
#include "test-helpers.h"

/* ------------------------------------------------------------------------ */
/* Histogram helpers                                                         */

/* The percentiles checked, in thousandths of a percent (99900 = p99.9). */
static const uint32_t check_mpcts[] = {
    1000, 10000, 25000, 50000, 70000, 90000, 99000, 99900, 99990, 100000,
};

/* Ascending order for qsort(). */
static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return x < y ? -1 : x > y;
}

/* The exact percentile of sorted[0..n): the sample of rank ceil(p/100*n). */
static uint64_t exact_percentile(const uint64_t *sorted, size_t n,
                                 uint32_t mpct)
{
    uint64_t rank = ((uint64_t)mpct * n + 99999) / 100000;

    g_assert_cmpuint(rank, >=, 1);
    g_assert_cmpuint(rank, <=, n);
    return sorted[rank - 1];
}

/* How many of sorted[0..n) are <= x. */
static size_t count_le(const uint64_t *sorted, size_t n, double x)
{
    size_t lo = 0, hi = n;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;

        if ((double)sorted[mid] <= x) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return lo;
}

/* n samples log-uniform in [1 ns, 1 s], from a fixed seed. */
static uint64_t *log_uniform_samples(size_t n, uint32_t seed)
{
    g_autoptr(GRand) rand = g_rand_new_with_seed(seed);
    uint64_t *v = g_new(uint64_t, n);

    for (size_t i = 0; i < n; i++) {
        double x = exp(g_rand_double(rand) * log(1e9));

        v[i] = MAX((uint64_t)llround(x), 1);
    }
    return v;
}

static LatHist *hist_of(const uint64_t *v, size_t n)
{
    LatHist *h = lat_hist_new();

    for (size_t i = 0; i < n; i++) {
        lat_hist_add(h, v[i]);
    }
    return h;
}

/* Sorted copy of v[0..n). */
static uint64_t *sorted_copy(const uint64_t *v, size_t n)
{
    uint64_t *s = g_memdup2(v, n * sizeof(*v));

    qsort(s, n, sizeof(*s), cmp_u64);
    return s;
}

/*
 * 100k samples drawn log-uniformly from 1 ns to 1 s (a fixed seed), a
 * sorted copy for the exact answers, and their histogram: where the tests
 * of a whole distribution start.  After changing v, wide_redo() makes
 * sorted and h anew.
 */
typedef struct Wide {
    size_t n;
    uint64_t *v;
    uint64_t *sorted;
    LatHist *h;
} Wide;

static void wide_redo(Wide *w)
{
    g_free(w->sorted);
    if (w->h) {
        lat_hist_free(w->h);
    }
    w->sorted = sorted_copy(w->v, w->n);
    w->h = hist_of(w->v, w->n);
}

static void wide_init(Wide *w)
{
    *w = (Wide) { .n = 100000 };
    w->v = log_uniform_samples(w->n, 20240611);
    wide_redo(w);
    /* The draw does span 1 ns .. 1 s (else the tests would prove less). */
    g_assert_cmpuint(w->sorted[0], <, 64);
    g_assert_cmpuint(w->sorted[w->n - 1], >, 900000000);
}

static void wide_fini(Wide *w)
{
    lat_hist_free(w->h);
    g_free(w->sorted);
    g_free(w->v);
}

/*
 * Assert that every checked percentile of h is the exact one of sorted, or
 * above it by at most 1.6% (the histogram's promise), and never above max.
 */
static void assert_percentiles_close(const LatHist *h, const uint64_t *sorted,
                                     size_t n)
{
    for (size_t i = 0; i < G_N_ELEMENTS(check_mpcts); i++) {
        double p = check_mpcts[i] / 1000.0;
        uint64_t want = exact_percentile(sorted, n, check_mpcts[i]);
        uint64_t got = lat_hist_percentile(h, p);

        if (got < want || (double)(got - want) > (double)want * 0.016) {
            g_test_message("p%g: got %" PRIu64 ", exact %" PRIu64, p, got,
                           want);
            g_assert_not_reached();
        }
        g_assert_cmpuint(got, <=, sorted[n - 1]);
    }
    g_assert_cmpuint(lat_hist_percentile(h, 100), ==, sorted[n - 1]);
}

/* Sum of v[0..n) as a double (exact while below 2^53). */
static double sum_of(const uint64_t *v, size_t n)
{
    uint64_t sum = 0;

    for (size_t i = 0; i < n; i++) {
        sum += v[i];
    }
    g_assert_cmpuint(sum, <, UINT64_C(1) << 53);
    return (double)sum;
}

/*
 * Assert the CDF promises for h, built from sorted[0..n), asked for
 * max_points points; returns the number of points.
 */
static size_t check_cdf(const LatHist *h, const uint64_t *sorted, size_t n,
                        size_t max_points)
{
    g_autofree double *ns = g_new(double, max_points);
    g_autofree double *frac = g_new(double, max_points);
    size_t got = lat_hist_cdf(h, ns, frac, max_points);

    g_assert_cmpuint(got, >=, 1);
    g_assert_cmpuint(got, <=, max_points);
    g_assert_cmpfloat(ns[got - 1], ==, (double)sorted[n - 1]);
    g_assert_cmpfloat(frac[got - 1], ==, 1.0);
    for (size_t i = 0; i < got; i++) {
        /*
         * The fraction at a point is the histogram's, so only known to a
         * bucket: at least the exact fraction 1/64 below the point, at
         * most the exact fraction 1/64 above it.
         */
        double lo = (double)count_le(sorted, n, ns[i] * (1 - 1.0 / 64)) / n;
        double hi = (double)count_le(sorted, n, ns[i] * (1 + 1.0 / 64)) / n;

        if (!(frac[i] > 0 && frac[i] <= 1 && frac[i] >= lo &&
              frac[i] <= hi)) {
            g_test_message("point %zu of %zu: (%.0f ns, %g); exact fraction "
                           "between %g and %g", i, got, ns[i], frac[i], lo,
                           hi);
            g_assert_not_reached();
        }
        g_assert_cmpfloat(ns[i], >=, (double)sorted[0]);
        g_assert_cmpfloat(ns[i], <=, (double)sorted[n - 1]);
        if (i > 0) {
            g_assert_cmpfloat(ns[i], >, ns[i - 1]);
            g_assert_cmpfloat(frac[i], >=, frac[i - 1]);
        }
    }
    return got;
}

/* How many distinct buckets sorted[0..n) fill (a bucket per value < 64,
 * then 64 per power of two). */
static size_t distinct_buckets(const uint64_t *sorted, size_t n)
{
    size_t count = 0;
    uint64_t last = UINT64_MAX;

    for (size_t i = 0; i < n; i++) {
        uint64_t v = sorted[i], b;

        if (v < 64) {
            b = v;
        } else {
            unsigned e = 63 - __builtin_clzll(v);

            b = ((uint64_t)e << 8) | ((v >> (e - 6)) & 63);
        }
        if (b != last) {
            count++;
            last = b;
        }
    }
    return count;
}

/* ------------------------------------------------------------------------ */
/* Histogram                                                                 */

/* An empty histogram answers 0 to everything, and has no CDF. */
static void assert_hist_empty(const LatHist *h)
{
    double ns[4], frac[4];

    g_assert_cmpuint(lat_hist_count(h), ==, 0);
    g_assert_cmpuint(lat_hist_min(h), ==, 0);
    g_assert_cmpuint(lat_hist_max(h), ==, 0);
    g_assert_cmpfloat(lat_hist_mean(h), ==, 0.0);
    g_assert_cmpuint(lat_hist_percentile(h, 50), ==, 0);
    g_assert_cmpuint(lat_hist_percentile(h, 99), ==, 0);
    g_assert_cmpuint(lat_hist_percentile(h, 100), ==, 0);
    g_assert_cmpuint(lat_hist_cdf(h, ns, frac, G_N_ELEMENTS(ns)), ==, 0);
}

static void test_hist_empty(void)
{
    LatHist *h = lat_hist_new();

    assert_hist_empty(h);
    lat_hist_free(h);
}

/* Below 64 ns every value has its own bucket: every answer is exact. */
static void test_hist_exact_small(void)
{
    g_autoptr(GRand) rand = g_rand_new_with_seed(64);
    uint64_t v[1000];
    g_autofree uint64_t *sorted = NULL;
    LatHist *h;

    for (size_t i = 0; i < G_N_ELEMENTS(v); i++) {
        v[i] = g_rand_int_range(rand, 0, 64);
    }
    h = hist_of(v, G_N_ELEMENTS(v));
    sorted = sorted_copy(v, G_N_ELEMENTS(v));
    for (size_t i = 0; i < G_N_ELEMENTS(check_mpcts); i++) {
        g_assert_cmpuint(lat_hist_percentile(h, check_mpcts[i] / 1000.0), ==,
                         exact_percentile(sorted, G_N_ELEMENTS(v),
                                          check_mpcts[i]));
    }
    g_assert_cmpuint(lat_hist_min(h), ==, sorted[0]);
    g_assert_cmpuint(lat_hist_max(h), ==, sorted[G_N_ELEMENTS(v) - 1]);
    g_assert_cmpfloat(lat_hist_mean(h), ==,
                      sum_of(v, G_N_ELEMENTS(v)) / G_N_ELEMENTS(v));
    lat_hist_free(h);

    /* Each value alone, and 0..63 once each: rank k+1 is value k. */
    h = lat_hist_new();
    for (uint64_t k = 0; k < 64; k++) {
        LatHist *one = lat_hist_new();

        lat_hist_add(one, k);
        lat_hist_add(one, k);
        g_assert_cmpuint(lat_hist_percentile(one, 50), ==, k);
        g_assert_cmpuint(lat_hist_min(one), ==, k);
        g_assert_cmpuint(lat_hist_max(one), ==, k);
        lat_hist_free(one);
        lat_hist_add(h, k);
    }
    for (uint64_t k = 0; k < 64; k++) {
        /* (k + 0.5) / 64 of the samples: rank k + 1. */
        g_assert_cmpuint(lat_hist_percentile(h, (k + 0.5) * 100 / 64), ==, k);
    }
    lat_hist_free(h);
}

static void test_hist_percentile_random(void)
{
    Wide w;

    wide_init(&w);
    g_assert_cmpuint(lat_hist_count(w.h), ==, w.n);
    g_assert_cmpuint(lat_hist_min(w.h), ==, w.sorted[0]);
    g_assert_cmpuint(lat_hist_max(w.h), ==, w.sorted[w.n - 1]);
    g_assert_cmpfloat(lat_hist_mean(w.h), ==, sum_of(w.v, w.n) / w.n);
    assert_percentiles_close(w.h, w.sorted, w.n);

    /* The same from a narrow band well above 64 ns (1.0 us .. 1.1 us),
     * where several samples share each bucket. */
    for (size_t i = 0; i < w.n; i++) {
        w.v[i] = 1000 + w.v[i] % 100;
    }
    wide_redo(&w);
    assert_percentiles_close(w.h, w.sorted, w.n);
    g_assert_cmpfloat(lat_hist_mean(w.h), ==, sum_of(w.v, w.n) / w.n);
    wide_fini(&w);
}

/*
 * Percentiles given as decimals (99.9) are not exact doubles: the rank
 * must still be the exact ceil(p/100 * n), not one more because
 * 99.9 / 100 * 1000 computes as 999.0000000000001.
 */
static void test_hist_percentile_decimal(void)
{
    LatHist *h = lat_hist_new();

    /* 1..1000 once each; 992..999 share a bucket, 1000 starts the next. */
    for (uint64_t v = 1; v <= 1000; v++) {
        lat_hist_add(h, v);
    }
    g_assert_cmpuint(lat_hist_percentile(h, 99.9), ==, 999);
    g_assert_cmpuint(lat_hist_percentile(h, 100), ==, 1000);
    /* Ranks 9 and 11 (exact values below 64), not 10 and 12. */
    g_assert_cmpuint(lat_hist_percentile(h, 0.9), ==, 9);
    g_assert_cmpuint(lat_hist_percentile(h, 1.1), ==, 11);
    g_assert_cmpuint(lat_hist_percentile(h, 0.1), ==, 1);
    g_assert_cmpuint(lat_hist_percentile(h, 0.0001), ==, 1);
    lat_hist_free(h);
}

static void test_hist_clamp(void)
{
    const uint64_t top = (UINT64_C(1) << 40) - 1;
    LatHist *h = lat_hist_new();

    lat_hist_add(h, 100);
    lat_hist_add(h, UINT64_C(1) << 40);
    lat_hist_add(h, UINT64_C(1) << 50);
    lat_hist_add(h, UINT64_MAX);
    g_assert_cmpuint(lat_hist_count(h), ==, 4);
    g_assert_cmpuint(lat_hist_min(h), ==, 100);
    g_assert_cmpuint(lat_hist_max(h), ==, top);
    g_assert_cmpuint(lat_hist_percentile(h, 100), ==, top);
    g_assert_cmpuint(lat_hist_percentile(h, 50), ==, top);
    g_assert_cmpuint(lat_hist_percentile(h, 25), ==, 100);
    g_assert_cmpfloat(lat_hist_mean(h), ==, (100.0 + 3.0 * top) / 4);
    lat_hist_free(h);

    /* The largest value kept as is, and the top bucket's percentile. */
    h = lat_hist_new();
    lat_hist_add(h, top);
    lat_hist_add(h, top - 1);
    g_assert_cmpuint(lat_hist_max(h), ==, top);
    g_assert_cmpuint(lat_hist_min(h), ==, top - 1);
    g_assert_cmpuint(lat_hist_percentile(h, 50), ==, top);
    lat_hist_free(h);
}

static void assert_hist_equal(const LatHist *a, const LatHist *b)
{
    double ns_a[300], frac_a[300], ns_b[300], frac_b[300];
    size_t na, nb;

    g_assert_cmpuint(lat_hist_count(a), ==, lat_hist_count(b));
    g_assert_cmpuint(lat_hist_min(a), ==, lat_hist_min(b));
    g_assert_cmpuint(lat_hist_max(a), ==, lat_hist_max(b));
    g_assert_cmpfloat(lat_hist_mean(a), ==, lat_hist_mean(b));
    for (uint32_t mp = 1000; mp <= 100000; mp += 1000) {
        g_assert_cmpuint(lat_hist_percentile(a, mp / 1000.0), ==,
                         lat_hist_percentile(b, mp / 1000.0));
    }
    for (size_t i = 0; i < G_N_ELEMENTS(check_mpcts); i++) {
        double p = check_mpcts[i] / 1000.0;

        g_assert_cmpuint(lat_hist_percentile(a, p), ==,
                         lat_hist_percentile(b, p));
    }
    /* Both CDF branches see the same buckets. */
    for (size_t max = 8; max <= 300; max += 292) {
        na = lat_hist_cdf(a, ns_a, frac_a, max);
        nb = lat_hist_cdf(b, ns_b, frac_b, max);
        g_assert_cmpuint(na, ==, nb);
        g_assert_cmpmem(ns_a, na * sizeof(double), ns_b, nb * sizeof(double));
        g_assert_cmpmem(frac_a, na * sizeof(double), frac_b,
                        nb * sizeof(double));
    }
}

static void test_hist_merge(void)
{
    const size_t n = 30000;
    g_autofree uint64_t *v = log_uniform_samples(n, 7);
    LatHist *all = hist_of(v, n);
    LatHist *parts[3] = { lat_hist_new(), lat_hist_new(), lat_hist_new() };
    LatHist *into_empty = lat_hist_new();
    LatHist *empty = lat_hist_new();

    /*
     * Part 0 gets the large samples, part 1 the small ones (so neither
     * part's min or max is the total's by accident), part 2 none.
     */
    for (size_t i = 0; i < n; i++) {
        lat_hist_add(parts[v[i] < 10000 ? 1 : 0], v[i]);
    }
    g_assert_cmpuint(lat_hist_count(parts[0]), >, 0);
    g_assert_cmpuint(lat_hist_count(parts[1]), >, 0);

    lat_hist_merge(parts[0], parts[2]);     /* empty source: no change */
    g_assert_cmpuint(lat_hist_min(parts[0]), >=, 10000);
    lat_hist_merge(parts[0], parts[1]);
    assert_hist_equal(parts[0], all);

    /* An empty destination takes the source's min and max. */
    lat_hist_merge(into_empty, all);
    assert_hist_equal(into_empty, all);

    /* Merging two empty histograms keeps it empty. */
    lat_hist_merge(parts[2], empty);
    g_assert_cmpuint(lat_hist_count(parts[2]), ==, 0);
    g_assert_cmpuint(lat_hist_min(parts[2]), ==, 0);
    g_assert_cmpuint(lat_hist_max(parts[2]), ==, 0);

    for (size_t i = 0; i < G_N_ELEMENTS(parts); i++) {
        lat_hist_free(parts[i]);
    }
    lat_hist_free(into_empty);
    lat_hist_free(empty);
    lat_hist_free(all);
}

static void test_hist_reset(void)
{
    LatHist *h = lat_hist_new();
    double ns[4], frac[4];

    lat_hist_add(h, 3);
    lat_hist_add(h, 5000);
    lat_hist_add(h, 7000000);
    lat_hist_reset(h);
    assert_hist_empty(h);

    /* Nothing of before survives: not the min, max, sum or buckets. */
    lat_hist_add(h, 4000);
    g_assert_cmpuint(lat_hist_count(h), ==, 1);
    g_assert_cmpuint(lat_hist_min(h), ==, 4000);
    g_assert_cmpuint(lat_hist_max(h), ==, 4000);
    g_assert_cmpfloat(lat_hist_mean(h), ==, 4000.0);
    g_assert_cmpuint(lat_hist_percentile(h, 1), ==, 4000);
    g_assert_cmpuint(lat_hist_cdf(h, ns, frac, G_N_ELEMENTS(ns)), ==, 1);
    g_assert_cmpfloat(ns[0], ==, 4000.0);
    g_assert_cmpfloat(frac[0], ==, 1.0);
    lat_hist_free(h);
}

/* Few non-empty buckets: one point per bucket, at its upper edge. */
static void test_hist_cdf_few_buckets(void)
{
    /* Buckets: 1 (exact), 5 (exact), 100 (exact: width 1 at 64..127),
     * 1000 (1000..1007: the last point is the max, 1003, not 1007). */
    static const uint64_t v[] = { 1, 1, 5, 100, 1000, 1003, 1000 };
    static const double want_ns[] = { 1, 5, 100, 1003 };
    static const double want_frac[] = { 2.0 / 7, 3.0 / 7, 4.0 / 7, 1.0 };
    g_autofree uint64_t *sorted = sorted_copy(v, G_N_ELEMENTS(v));
    LatHist *h = hist_of(v, G_N_ELEMENTS(v));
    double ns[8], frac[8];
    size_t n;

    n = lat_hist_cdf(h, ns, frac, G_N_ELEMENTS(ns));
    g_assert_cmpuint(n, ==, 4);
    for (size_t i = 0; i < n; i++) {
        g_assert_cmpfloat(ns[i], ==, want_ns[i]);
        g_assert_cmpfloat_with_epsilon(frac[i], want_frac[i], 1e-12);
    }
    /* Exactly enough room is still "few". */
    g_assert_cmpuint(lat_hist_cdf(h, ns, frac, 4), ==, 4);
    g_assert_cmpfloat(ns[1], ==, 5.0);
    check_cdf(h, sorted, G_N_ELEMENTS(v), 4);
    check_cdf(h, sorted, G_N_ELEMENTS(v), 8);
    lat_hist_free(h);

    /* Random samples, room for every bucket. */
    {
        const size_t count = 5000;
        g_autofree uint64_t *r = log_uniform_samples(count, 99);
        g_autofree uint64_t *rs = sorted_copy(r, count);
        size_t buckets = distinct_buckets(rs, count);

        h = hist_of(r, count);
        g_assert_cmpuint(check_cdf(h, rs, count, buckets), ==, buckets);
        g_assert_cmpuint(check_cdf(h, rs, count, buckets + 100), ==,
                         buckets);
        lat_hist_free(h);
    }
}

/* More non-empty buckets than points: points spread evenly in log(ns). */
static void test_hist_cdf_many_buckets(void)
{
    double ns[50], frac[50];
    size_t buckets, got;
    Wide w;

    wide_init(&w);
    buckets = distinct_buckets(w.sorted, w.n);
    g_assert_cmpuint(buckets, >, 1000);
    got = check_cdf(w.h, w.sorted, w.n, buckets - 1);
    g_assert_cmpuint(got, >, (buckets - 1) / 2);
    check_cdf(w.h, w.sorted, w.n, 2);
    g_assert_cmpuint(check_cdf(w.h, w.sorted, w.n, 1), ==, 1);

    /*
     * 50 points over 1 ns .. 1 s: a step of 1e9^(1/49) (x1.53).  Integer
     * truncation near 1 ns may merge points, so allow some to be missing
     * and each step to be up to twice the ideal.
     */
    got = check_cdf(w.h, w.sorted, w.n, 50);
    g_assert_cmpuint(got, >=, 40);
    got = lat_hist_cdf(w.h, ns, frac, 50);
    for (size_t i = 1; i < got; i++) {
        double step = pow((double)w.sorted[w.n - 1] / (double)w.sorted[0],
                          1 / 49.0);

        g_assert_cmpfloat(ns[i] / ns[i - 1], <=, 2 * step);
    }

    /*
     * A min above 64 ns that is not a bucket's upper edge (1000 ns is in
     * 1000..1007): the first point, at the min, still has a fraction > 0.
     */
    for (size_t i = 0; i < w.n; i++) {
        w.v[i] = 1001 + w.v[i] % 1000000;
    }
    w.v[0] = 1000;
    wide_redo(&w);
    g_assert_cmpuint(w.sorted[0], ==, 1000);
    check_cdf(w.h, w.sorted, w.n, 50);
    check_cdf(w.h, w.sorted, w.n, 3);

    /* A min of 0. */
    w.v[0] = 0;
    wide_redo(&w);
    check_cdf(w.h, w.sorted, w.n, 50);
    wide_fini(&w);
}

/* ------------------------------------------------------------------------ */
/* Verify                                                                    */

/* (bench-int.h's SECTOR is virtio-blk's; the same 512 bytes.) */
#undef SECTOR
#define SECTOR VERIFY_SECTOR

static uint8_t *filled(uint64_t off, size_t len, uint32_t gen)
{
    uint8_t *buf = g_malloc(len);

    verify_fill(buf, off, len, gen);
    return buf;
}

/* verify_check() that must find exactly `bad` bad sectors. */
static VerifyMismatch check_bad(const void *buf, uint64_t off, size_t len,
                                uint32_t expected_gen, unsigned bad)
{
    VerifyMismatch first;

    memset(&first, 0xa5, sizeof(first));
    g_assert_cmpuint(verify_check(buf, off, len, expected_gen, &first), ==,
                     bad);
    g_assert_cmpuint(verify_check(buf, off, len, expected_gen, NULL), ==,
                     bad);
    return first;
}

/* m describes exactly this mismatch. */
static void assert_mismatch(const VerifyMismatch *m, VerifyProblem problem,
                            uint64_t offset, uint64_t found_sector,
                            uint32_t found_gen, uint32_t expected_gen)
{
    g_assert_cmpint(m->problem, ==, problem);
    g_assert_cmpuint(m->offset, ==, offset);
    g_assert_cmpuint(m->found_sector, ==, found_sector);
    g_assert_cmpuint(m->found_gen, ==, found_gen);
    g_assert_cmpuint(m->expected_gen, ==, expected_gen);
}

static void test_verify_roundtrip(void)
{
    static const uint64_t offs[] = { 0, 512, 1024 * 1024 + 3 * 512,
                                     UINT64_C(1) << 40 };
    const size_t len = 64 * 1024;

    for (size_t i = 0; i < G_N_ELEMENTS(offs); i++) {
        g_autofree uint8_t *buf = filled(offs[i], len, 7);
        VerifyMismatch first, untouched;

        memset(&first, 0x5a, sizeof(first));
        untouched = first;
        g_assert_cmpuint(verify_check(buf, offs[i], len, 7, &first), ==, 0);
        g_assert_cmpuint(verify_check(buf, offs[i], len, 0, &first), ==, 0);
        g_assert_cmpmem(&first, sizeof(first), &untouched, sizeof(untouched));
        /* Any part of it, checked where it lies. */
        g_assert_cmpuint(verify_check(buf + 5 * SECTOR, offs[i] + 5 * SECTOR,
                                      3 * SECTOR, 7, NULL), ==, 0);
    }
}

/* The header, byte by byte, as the on-disk format says. */
static void test_verify_format(void)
{
    const uint64_t sector = UINT64_C(0x0102030405);
    const uint8_t want[16] = {
        'S', 'P', 'B', 'V',
        0x0d, 0x0c, 0x0b, 0x0a,                          /* gen, LE */
        0x05, 0x04, 0x03, 0x02, 0x01, 0x00, 0x00, 0x00,  /* sector, LE */
    };
    uint8_t a[SECTOR], b[SECTOR], zero[8] = { 0 };

    verify_fill(a, sector * SECTOR, SECTOR, 0x0a0b0c0d);
    g_assert_cmpmem(a, 16, want, 16);
    g_assert_cmpuint(a[0] | a[1] << 8 | a[2] << 16 | (uint32_t)a[3] << 24, ==,
                     VERIFY_MAGIC);
    g_assert_true(memcmp(a + 16, zero, 8) != 0);     /* a checksum is set */

    /* Another generation: gen and checksum change, the sector does not. */
    verify_fill(b, sector * SECTOR, SECTOR, 0x0a0b0c0e);
    g_assert_cmpuint(b[4], ==, 0x0e);
    g_assert_cmpmem(b + 8, 8, want + 8, 8);
    g_assert_true(memcmp(a + 16, b + 16, 8) != 0);

    /* The contents depend on (sector, gen) only: a sector filled alone is
     * the same as that sector filled as part of a larger write. */
    {
        g_autofree uint8_t *big = filled((sector - 2) * SECTOR, 4 * SECTOR,
                                         0x0a0b0c0d);

        g_assert_cmpmem(big + 2 * SECTOR, SECTOR, a, SECTOR);
    }

    g_assert_cmpstr(verify_problem_name(VERIFY_OK), ==, "ok");
    g_assert_cmpstr(verify_problem_name(VERIFY_NO_HEADER), ==, "no header");
    g_assert_cmpstr(verify_problem_name(VERIFY_WRONG_SECTOR), ==,
                    "wrong sector");
    g_assert_cmpstr(verify_problem_name(VERIFY_BAD_CHECKSUM), ==,
                    "bad checksum");
    g_assert_cmpstr(verify_problem_name(VERIFY_WRONG_GENERATION), ==,
                    "wrong generation");
}

/* One byte changed anywhere in a sector is caught, and named. */
static void test_verify_corrupt_byte(void)
{
    /* Byte positions in the sector: magic, gen, sector, checksum,
     * payload. */
    static const unsigned pos[] = {
        0, 3, 4, 7, 8, 15, 16, 23, 24, 100, 256, 511,
    };
    static const unsigned victims[] = { 0, 3, 7 };
    const uint64_t off = 5 * 4096;
    const size_t len = 8 * SECTOR;
    const uint32_t gen = 9;
    g_autofree uint8_t *good = filled(off, len, gen);
    g_autofree uint8_t *buf = g_malloc(len);

    for (size_t v = 0; v < G_N_ELEMENTS(victims); v++) {
        for (size_t i = 0; i < G_N_ELEMENTS(pos); i++) {
            size_t at = victims[v] * SECTOR + pos[i];
            uint64_t sector_off = off + victims[v] * SECTOR;
            VerifyMismatch m;

            for (unsigned flip = 0x01; flip <= 0x80; flip <<= 7) {
                memcpy(buf, good, len);
                buf[at] ^= flip;
                m = check_bad(buf, off, len, gen, 1);
                g_assert_cmpuint(m.offset, ==, sector_off);
                g_assert_cmpuint(m.expected_gen, ==, gen);
                if (pos[i] < 4) {
                    /* Without its magic a sector is "never written"; its
                     * other fields are not taken as a header. */
                    g_assert_cmpint(m.problem, ==, VERIFY_NO_HEADER);
                    g_assert_cmpuint(m.found_sector, ==, 0);
                    g_assert_cmpuint(m.found_gen, ==, 0);
                    check_bad(buf, off, len, 0, 0);
                    continue;
                }
                g_assert_cmpint(m.problem, ==, VERIFY_BAD_CHECKSUM);
                if (pos[i] >= 16) {
                    g_assert_cmpuint(m.found_sector, ==, sector_off / SECTOR);
                    g_assert_cmpuint(m.found_gen, ==, gen);
                }
                /* Not knowing the generation does not excuse it. */
                m = check_bad(buf, off, len, 0, 1);
                g_assert_cmpint(m.problem, ==, VERIFY_BAD_CHECKSUM);
                g_assert_cmpuint(m.offset, ==, sector_off);
                g_assert_cmpuint(m.expected_gen, ==, 0);
            }
        }
    }
}

static void test_verify_wrong_sector(void)
{
    const uint64_t a = 8192, b = 16384;
    const size_t len = 4 * SECTOR;
    g_autofree uint8_t *buf = filled(a, len, 2);
    VerifyMismatch m;

    m = check_bad(buf, b, len, 2, 4);
    assert_mismatch(&m, VERIFY_WRONG_SECTOR, b, a / SECTOR, 2, 2);
    m = check_bad(buf, b, len, 0, 4);
    g_assert_cmpint(m.problem, ==, VERIFY_WRONG_SECTOR);

    /* Off by one sector: every sector is misplaced. */
    m = check_bad(buf, a + SECTOR, len, 2, 4);
    g_assert_cmpint(m.problem, ==, VERIFY_WRONG_SECTOR);
    g_assert_cmpuint(m.offset, ==, a + SECTOR);
    g_assert_cmpuint(m.found_sector, ==, a / SECTOR);

    /* One sector copied over another. */
    memcpy(buf + 2 * SECTOR, buf, SECTOR);
    m = check_bad(buf, a, len, 2, 1);
    g_assert_cmpint(m.problem, ==, VERIFY_WRONG_SECTOR);
    g_assert_cmpuint(m.offset, ==, a + 2 * SECTOR);
    g_assert_cmpuint(m.found_sector, ==, a / SECTOR);
}

static void test_verify_stale_generation(void)
{
    const uint64_t off = 1 << 20;
    const size_t len = 3 * SECTOR;
    g_autofree uint8_t *buf = filled(off, len, 3);
    VerifyMismatch m;

    m = check_bad(buf, off, len, 4, 3);
    assert_mismatch(&m, VERIFY_WRONG_GENERATION, off, off / SECTOR, 3, 4);

    m = check_bad(buf, off, len, 2, 3);     /* newer is wrong too */
    g_assert_cmpint(m.problem, ==, VERIFY_WRONG_GENERATION);
    check_bad(buf, off, len, 3, 0);
    check_bad(buf, off, len, 0, 0);          /* any generation */
}

static void test_verify_zero(void)
{
    const uint64_t off = 3 * SECTOR;
    uint8_t buf[4 * SECTOR] = { 0 };
    VerifyMismatch m;

    m = check_bad(buf, off, sizeof(buf), 1, 4);
    assert_mismatch(&m, VERIFY_NO_HEADER, off, 0, 0, 1);
    check_bad(buf, off, sizeof(buf), 0, 0);
}

/* Several bad sectors, each bad in its own way: the count is exact. */
static void test_verify_count(void)
{
    const uint64_t off = 64 * 1024;
    const size_t len = 16 * SECTOR;
    g_autofree uint8_t *buf = filled(off, len, 5);
    VerifyMismatch m;

    buf[2 * SECTOR + 300] ^= 0x10;                          /* checksum */
    memset(buf + 5 * SECTOR, 0, SECTOR);                    /* no header */
    verify_fill(buf + 6 * SECTOR, off + 6 * SECTOR, SECTOR, 4);  /* stale */
    memcpy(buf + 15 * SECTOR, buf, SECTOR);                 /* misplaced */

    m = check_bad(buf, off, len, 5, 4);
    g_assert_cmpint(m.problem, ==, VERIFY_BAD_CHECKSUM);
    g_assert_cmpuint(m.offset, ==, off + 2 * SECTOR);

    /* Not knowing the generation: never written and stale are fine. */
    check_bad(buf, off, len, 0, 2);

    /* The first is the lowest: from sector 3 on, the zeroed one. */
    m = check_bad(buf + 3 * SECTOR, off + 3 * SECTOR, len - 3 * SECTOR, 5, 3);
    g_assert_cmpint(m.problem, ==, VERIFY_NO_HEADER);
    g_assert_cmpuint(m.offset, ==, off + 5 * SECTOR);
    m = check_bad(buf + 6 * SECTOR, off + 6 * SECTOR, len - 6 * SECTOR, 5, 2);
    g_assert_cmpint(m.problem, ==, VERIFY_WRONG_GENERATION);
    g_assert_cmpuint(m.offset, ==, off + 6 * SECTOR);
    g_assert_cmpuint(m.found_gen, ==, 4);
    m = check_bad(buf + 7 * SECTOR, off + 7 * SECTOR, len - 7 * SECTOR, 5, 1);
    g_assert_cmpint(m.problem, ==, VERIFY_WRONG_SECTOR);
    g_assert_cmpuint(m.offset, ==, off + 15 * SECTOR);
    g_assert_cmpuint(m.found_sector, ==, off / SECTOR);
}

/* Different (place, generation): different payloads (bytes 24..511). */
static void test_verify_distinct_payloads(void)
{
    static const struct {
        uint64_t off;
        uint32_t gen;
    } cases[] = {
        { 0, 1 }, { 0, 2 }, { SECTOR, 1 }, { SECTOR, 2 },
        { 1 << 30, 1 }, { 1 << 30, 0xffffffffu }, { 2 * SECTOR, 1 },
    };
    uint8_t bufs[G_N_ELEMENTS(cases)][SECTOR];
    uint8_t again[SECTOR];

    for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
        verify_fill(bufs[i], cases[i].off, SECTOR, cases[i].gen);
        verify_fill(again, cases[i].off, SECTOR, cases[i].gen);
        g_assert_cmpmem(again, SECTOR, bufs[i], SECTOR);   /* repeatable */
    }
    for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
        for (size_t j = i + 1; j < G_N_ELEMENTS(cases); j++) {
            unsigned same = 0;

            for (unsigned k = 24; k < SECTOR; k++) {
                same += bufs[i][k] == bufs[j][k];
            }
            /* Unrelated random bytes agree at about 1 in 256 places. */
            if (same > 20) {
                g_test_message("(%" PRIu64 ", %u) and (%" PRIu64 ", %u) "
                               "share %u payload bytes", cases[i].off,
                               cases[i].gen, cases[j].off, cases[j].gen,
                               same);
                g_assert_not_reached();
            }
        }
    }
}

/* ------------------------------------------------------------------------ */
/* CPU                                                                       */

/* Burn CPU in the calling thread until it has used ns of it. */
static void burn_thread_cpu(int64_t ns)
{
    struct timespec ts;
    int64_t start, now;

    g_assert_cmpint(clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts), ==, 0);
    start = ts.tv_sec * NS_PER_SEC + ts.tv_nsec;
    do {
        g_assert_cmpint(clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts), ==, 0);
        now = ts.tv_sec * NS_PER_SEC + ts.tv_nsec;
    } while (now - start < ns);
}

/*
 * A thread that burns CPU, then stays alive until released (a thread that
 * has ended is not in the next snapshot, and its time is lost).
 */
typedef struct Burner {
    int64_t burn_ns;
    Gate burnt;                 /* opened by the burner once it has burnt */
    Gate release;               /* opened by the test: the burner may end */
    GThread *thread;
} Burner;

static gpointer burner_run(gpointer opaque)
{
    Burner *b = opaque;

    burn_thread_cpu(b->burn_ns);
    gate_open(&b->burnt);
    gate_pass(&b->release);
    return NULL;
}

/* Start a burner and wait until it has burnt burn_ns. */
static void burner_start(Burner *b, int64_t burn_ns)
{
    b->burn_ns = burn_ns;
    gate_init(&b->burnt, false);
    gate_init(&b->release, false);
    b->thread = g_thread_new("burner", burner_run, b);
    gate_pass(&b->burnt);
}

static void burner_stop(Burner *b)
{
    gate_open(&b->release);
    g_thread_join(b->thread);
    gate_destroy(&b->burnt);
    gate_destroy(&b->release);
}

static CpuSnapshot *snapshot_self(void)
{
    Error *err = NULL;
    CpuSnapshot *s = cpu_snapshot_take(getpid(), &err);

    if (!s) {
        g_test_message("cpu_snapshot_take(self): %s",
                       err ? error_get_pretty(err) : "(no error set)");
        g_assert_not_reached();
    }
    g_assert_null(err);
    return s;
}

/* Whether this kernel has per-thread schedstat files. */
static bool have_schedstat(void)
{
    g_autofree char *path = g_strdup_printf("/proc/self/task/%d/schedstat",
                                            (int)gettid());

    return g_file_test(path, G_FILE_TEST_EXISTS);
}

/* The delta across a 200 ms burn by a thread created after `before`. */
static void delta_of_new_burner(CpuDelta *d)
{
    CpuSnapshot *before = snapshot_self(), *after;
    Burner b;

    burner_start(&b, 200 * NS_PER_MS);
    after = snapshot_self();
    cpu_snapshot_delta(before, after, d);
    burner_stop(&b);
    cpu_snapshot_free(before);
    cpu_snapshot_free(after);
    g_test_message("200 ms burnt: utime %.3f s, stime %.3f s, sched %.3f s, "
                   "%u threads", d->utime_s, d->stime_s, d->sched_s,
                   d->threads);
}

static void test_cpu_snapshot_self(void)
{
    CpuSnapshot *one = snapshot_self(), *two;
    CpuDelta d;
    Burner b;

    cpu_snapshot_delta(one, one, &d);
    g_assert_cmpuint(d.threads, >=, 1);
    g_assert_cmpfloat(d.utime_s, ==, 0.0);
    g_assert_cmpfloat(d.stime_s, ==, 0.0);
    g_assert_true(d.sched_s == 0.0 || d.sched_s < 0);

    /* A second thread, alive during the snapshot, is listed too. */
    burner_start(&b, 0);
    two = snapshot_self();
    cpu_snapshot_delta(one, two, &d);
    burner_stop(&b);
    g_assert_cmpuint(d.threads, >=, 2);
    cpu_snapshot_free(one);
    cpu_snapshot_free(two);
    cpu_snapshot_free(NULL);
}

/* A thread created after the first snapshot counts from zero (ticks). */
static void test_cpu_new_thread_ticks(void)
{
    CpuDelta d;

    delta_of_new_burner(&d);
    g_assert_cmpuint(d.threads, >=, 2);
    /* Ticks are 10 ms: 200 ms of work shows as at least 100 ms, and (in
     * seconds, not ticks or ms) far less than 2 s. */
    g_assert_cmpfloat(d.utime_s + d.stime_s, >=, 0.1);
    g_assert_cmpfloat(d.utime_s + d.stime_s, <, 2.0);
    g_assert_cmpfloat(d.utime_s, >=, 0);
    g_assert_cmpfloat(d.stime_s, >=, 0);
}

/* The same from schedstat, in ns. */
static void test_cpu_new_thread_schedstat(void)
{
    CpuDelta d;

    if (!have_schedstat()) {
        g_test_skip("/proc/self/task/TID/schedstat does not exist (kernel "
                    "without CONFIG_SCHED_INFO or schedstats)");
        return;
    }
    delta_of_new_burner(&d);
    g_assert_cmpfloat(d.sched_s, >=, 0.15);
    g_assert_cmpfloat(d.sched_s, <, 2.0);
}

/* An idle interval costs (almost) nothing. */
static void test_cpu_idle(void)
{
    CpuSnapshot *before, *after;
    CpuDelta d;

    before = snapshot_self();
    sleep_ns(100 * NS_PER_MS);
    after = snapshot_self();
    cpu_snapshot_delta(before, after, &d);
    g_test_message("100 ms idle: utime %.3f s, stime %.3f s, sched %.3f s",
                   d.utime_s, d.stime_s, d.sched_s);
    g_assert_cmpfloat(d.utime_s + d.stime_s, <, 0.05);
    if (have_schedstat()) {
        g_assert_cmpfloat(d.sched_s, >=, 0);
        g_assert_cmpfloat(d.sched_s, <, 0.05);
    } else {
        g_assert_cmpfloat(d.sched_s, <, 0);
    }
    cpu_snapshot_free(before);
    cpu_snapshot_free(after);
}

static void assert_no_such_pid(int pid)
{
    g_autofree char *pid_str = g_strdup_printf("%d", pid);
    Error *err = NULL;

    g_assert_null(cpu_snapshot_take(pid, &err));
    g_assert_nonnull(err);
    if (!strstr(error_get_pretty(err), pid_str)) {
        g_test_message("error \"%s\" does not name pid %s",
                       error_get_pretty(err), pid_str);
        g_assert_not_reached();
    }
    g_clear_error(&err);
    g_assert_null(cpu_snapshot_take(pid, NULL));
}

static void test_cpu_no_such_pid(void)
{
    g_autofree char *text = NULL;
    int64_t pid_max;
    pid_t child;
    int status;

    /* pid_max itself is never a pid (pids are below it). */
    g_assert_true(g_file_get_contents("/proc/sys/kernel/pid_max", &text,
                                      NULL, NULL));
    pid_max = g_ascii_strtoll(text, NULL, 10);
    g_assert_cmpint(pid_max, >, 1);
    assert_no_such_pid((int)pid_max);

    /* A child that has exited and been reaped. */
    child = fork();
    g_assert_cmpint(child, >=, 0);
    if (child == 0) {
        _exit(0);
    }
    g_assert_cmpint(waitpid(child, &status, 0), ==, child);
    assert_no_such_pid(child);
}

/* This thread's time used, by getrusage() (independent of the clock). */
static int64_t rusage_thread_ns(void)
{
    struct rusage ru;

    g_assert_cmpint(getrusage(RUSAGE_THREAD, &ru), ==, 0);
    return (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * NS_PER_SEC +
           (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000;
}

static void test_cpu_thread_ns(void)
{
    int64_t wall0, wall1, ru0;
    uint64_t t0, t1;
    Burner b;

    /* Work: 50 ms by getrusage() is about 50 ms by cpu_thread_ns(), and
     * never more than the wall clock allowed. */
    wall0 = g_get_monotonic_time() * 1000;
    t0 = cpu_thread_ns();
    ru0 = rusage_thread_ns();
    while (rusage_thread_ns() - ru0 < 50 * NS_PER_MS) {
        /* spin */
    }
    t1 = cpu_thread_ns();
    wall1 = g_get_monotonic_time() * 1000;
    g_assert_cmpuint(t1 - t0, >=, 45 * NS_PER_MS);
    g_assert_cmpuint(t1 - t0, <=, wall1 - wall0 + NS_PER_MS);

    /* Sleep: barely moves. */
    t0 = cpu_thread_ns();
    sleep_ns(100 * NS_PER_MS);
    t1 = cpu_thread_ns();
    g_assert_cmpuint(t1 - t0, <, 10 * NS_PER_MS);

    /* Another thread's work is not ours. */
    t0 = cpu_thread_ns();
    burner_start(&b, 100 * NS_PER_MS);
    t1 = cpu_thread_ns();
    burner_stop(&b);
    g_assert_cmpuint(t1 - t0, <, 10 * NS_PER_MS);
}

/* ------------------------------------------------------------------------ */
/* Options: --phase                                                          */

/* The defaults main() starts from. */
static BenchOpts default_opts(void)
{
    BenchOpts o;

    bench_opts_init(&o);
    return o;
}

/*
 * Parse "spindle-bench --socket=s ARGS..." (NULL-terminated) into *o.
 * Returns true, or false with the message in *msg (caller frees).
 */
static bool parse_args(BenchOpts *o, char **msg, ...)
{
    g_autoptr(GPtrArray) argv = g_ptr_array_new_with_free_func(g_free);
    Error *err = NULL;
    char **copy;
    const char *a;
    va_list ap;
    bool ok;

    g_ptr_array_add(argv, g_strdup("spindle-bench"));
    g_ptr_array_add(argv, g_strdup("--socket=s"));
    va_start(ap, msg);
    while ((a = va_arg(ap, const char *))) {
        g_ptr_array_add(argv, g_strdup(a));
    }
    va_end(ap);
    /* GOption rearranges argv: give it a copy of the pointers. */
    copy = g_memdup2(argv->pdata, argv->len * sizeof(char *));
    *o = default_opts();
    ok = bench_parse_command_line(argv->len, copy, o, &err);
    g_free(copy);
    *msg = NULL;
    if (!ok) {
        *msg = g_strdup(error_get_pretty(err));
        error_free(err);
    }
    return ok;
}

static void test_phase_parse(void)
{
    static const struct {
        const char *spec;
        double seconds;
        BenchLoad load;
        unsigned iodepth;
        double rate;
        const char *name;
    } cases[] = {
        { "2:qd1", 2, LOAD_QD, 1, 0, "qd1" },
        { "0.25:qd32", 0.25, LOAD_QD, 32, 0, "qd32" },
        { "1:idle", 1, LOAD_IDLE, 0, 0, "idle" },
        { "2:rate=10000", 2, LOAD_RATE, 0, 10000, "rate=10000" },
        { "0.5:rate=1500.5", 0.5, LOAD_RATE, 0, 1500.5, "rate=1500.5" },
    };

    for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
        BenchPhase p;
        Error *err = NULL;
        char name[32];

        g_test_message("%s", cases[i].spec);
        g_assert_true(bench_parse_phase(cases[i].spec, &p, &err));
        g_assert_null(err);
        g_assert_cmpfloat(p.seconds, ==, cases[i].seconds);
        g_assert_cmpint(p.load, ==, cases[i].load);
        g_assert_cmpuint(p.iodepth, ==, cases[i].iodepth);
        g_assert_cmpfloat(p.rate, ==, cases[i].rate);
        g_assert_cmpstr(bench_phase_load_name(&p, name, sizeof(name)), ==,
                        cases[i].name);
    }
}

static void test_phase_parse_bad(void)
{
    static const char *const bad[] = {
        "", "qd1", "2", "2:", ":qd1", "0:qd1", "-1:qd1", "x:qd1", "2:qd",
        "2:qd0", "2:qd-1", "2:qd1x", "2:qd99999", "2:rate=", "2:rate=0",
        "2:rate=-5", "2:rate=abc", "2:rate", "2:Idle", "2:idle ", "2:busy",
        "1e7:qd1",
    };

    for (size_t i = 0; i < G_N_ELEMENTS(bad); i++) {
        BenchPhase p;
        Error *err = NULL;

        g_test_message("'%s'", bad[i]);
        g_assert_false(bench_parse_phase(bad[i], &p, &err));
        g_assert_nonnull(err);
        g_assert_true(g_str_has_prefix(error_get_pretty(err), "--phase: "));
        /* The message shows what was given. */
        g_assert_nonnull(strstr(error_get_pretty(err), bad[i]));
        error_free(err);
    }
}

static void test_phase_command_line(void)
{
    BenchOpts o;
    g_autofree char *msg = NULL;

    g_assert_true(parse_args(&o, &msg, "--phase", "2:qd1", "--phase=1:idle",
                             "--phase", "2:rate=10000", "--phase", "1.5:qd4",
                             "--ramp", "0.5", NULL));
    g_assert_cmpuint(o.nphases, ==, 4);
    g_assert_cmpint(o.phases[0].load, ==, LOAD_QD);
    g_assert_cmpint(o.phases[1].load, ==, LOAD_IDLE);
    g_assert_cmpint(o.phases[2].load, ==, LOAD_RATE);
    g_assert_cmpfloat(o.phases[2].rate, ==, 10000);
    g_assert_cmpuint(o.phases[3].iodepth, ==, 4);
    g_assert_cmpfloat(o.phases[3].seconds, ==, 1.5);
    /* The run lasts the phases' sum; the ramp stays. */
    g_assert_cmpfloat(o.runtime, ==, 6.5);
    g_assert_true(o.have_deadline);
    g_assert_cmpfloat(o.ramp, ==, 0.5);
    g_assert_cmpuint(o.phase_max_qd, ==, 4);
    g_assert_true(o.phase_rate);
    g_assert_cmpuint(o.iodepth, ==, 0);
    g_assert_cmpfloat(o.rate, ==, 0);
    bench_opts_free(&o);

    /* Closed loops and idle only. */
    g_assert_true(parse_args(&o, &msg, "--phase", "1:idle", "--phase",
                             "1:qd8", NULL));
    g_assert_cmpuint(o.nphases, ==, 2);
    g_assert_cmpuint(o.phase_max_qd, ==, 8);
    g_assert_false(o.phase_rate);
    bench_opts_free(&o);

    /* Without --phase nothing changes. */
    g_assert_true(parse_args(&o, &msg, "--iodepth", "4", "--runtime", "2",
                             NULL));
    g_assert_cmpuint(o.nphases, ==, 0);
    g_assert_null(o.phases);
    g_assert_cmpuint(o.iodepth, ==, 4);
    g_assert_cmpfloat(o.runtime, ==, 2);
    bench_opts_free(&o);
}

static void test_phase_exclusive(void)
{
    static const struct {
        const char *opt, *value, *in_msg;
    } cases[] = {
        { "--runtime", "1", "--runtime" },
        { "--iodepth", "2", "--iodepth" },
        { "--rate", "1000", "--rate" },
        { "--count", "10", "--count" },
        { "--queues", "2", "--queues" },
    };

    for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
        BenchOpts o;
        g_autofree char *msg = NULL;

        g_test_message("%s %s", cases[i].opt, cases[i].value);
        g_assert_false(parse_args(&o, &msg, "--phase", "1:qd1", cases[i].opt,
                                  cases[i].value, NULL));
        g_assert_nonnull(msg);
        g_assert_true(g_str_has_prefix(msg, "--phase: "));
        g_assert_nonnull(strstr(msg, cases[i].in_msg));
        bench_opts_free(&o);
    }
    /* A bad spec among good ones fails the command line. */
    {
        BenchOpts o;
        g_autofree char *msg = NULL;

        g_assert_false(parse_args(&o, &msg, "--phase", "1:qd1", "--phase",
                                  "1:qd0", NULL));
        g_assert_nonnull(strstr(msg, "1:qd0"));
        bench_opts_free(&o);
    }
}

static const TestCase tests[] = {
    { "/bench/hist/empty", test_hist_empty },
    { "/bench/hist/exact-below-64", test_hist_exact_small },
    { "/bench/hist/percentile/random", test_hist_percentile_random },
    { "/bench/hist/percentile/decimal-p", test_hist_percentile_decimal },
    { "/bench/hist/clamp", test_hist_clamp },
    { "/bench/hist/merge", test_hist_merge },
    { "/bench/hist/reset", test_hist_reset },
    { "/bench/hist/cdf/few-buckets", test_hist_cdf_few_buckets },
    { "/bench/hist/cdf/many-buckets", test_hist_cdf_many_buckets },
    { "/bench/verify/roundtrip", test_verify_roundtrip },
    { "/bench/verify/format", test_verify_format },
    { "/bench/verify/corrupt-byte", test_verify_corrupt_byte },
    { "/bench/verify/wrong-sector", test_verify_wrong_sector },
    { "/bench/verify/stale-generation", test_verify_stale_generation },
    { "/bench/verify/zero", test_verify_zero },
    { "/bench/verify/count", test_verify_count },
    { "/bench/verify/distinct-payloads", test_verify_distinct_payloads },
    { "/bench/cpu/snapshot-self", test_cpu_snapshot_self },
    { "/bench/cpu/new-thread/ticks", test_cpu_new_thread_ticks },
    { "/bench/cpu/new-thread/schedstat", test_cpu_new_thread_schedstat },
    { "/bench/cpu/idle", test_cpu_idle },
    { "/bench/cpu/no-such-pid", test_cpu_no_such_pid },
    { "/bench/cpu/thread-ns", test_cpu_thread_ns },
    { "/bench/opts/phase/parse", test_phase_parse },
    { "/bench/opts/phase/parse-bad", test_phase_parse_bad },
    { "/bench/opts/phase/command-line", test_phase_command_line },
    { "/bench/opts/phase/exclusive", test_phase_exclusive },
};

TEST_MAIN(tests, 25)
