/*
 * spindle-bench: latency histogram.
 *
 * Log-linear buckets in the manner of HDR histograms: values below 64 ns
 * have a bucket each; above, every power of two [2^e, 2^(e+1)) is cut into
 * 64 equal buckets, so a bucket is never wider than 1/64 of its values.
 * That keeps percentiles within 1.6% with a fixed 17 KiB per histogram and
 * an add that is a shift, a mask and an increment: cheap enough to record
 * every I/O at millions per second.
 */
#include <math.h>
#include <string.h>
#include <glib.h>

#include "bench.h"

#define SUB_BITS        6
#define SUB_COUNT       (1u << SUB_BITS)                 /* 64 */
#define MAX_BITS        40                               /* values < 2^40 */
#define NBUCKETS        (SUB_COUNT + (MAX_BITS - SUB_BITS) * SUB_COUNT)
#define VALUE_MAX       ((UINT64_C(1) << MAX_BITS) - 1)

struct LatHist {
    uint64_t count;
    uint64_t min, max;
    double sum;
    uint64_t buckets[NBUCKETS];
};

static unsigned bucket_of(uint64_t v)
{
    unsigned e;

    if (v < SUB_COUNT) {
        return v;
    }
    e = 63 - __builtin_clzll(v);                         /* >= SUB_BITS */
    return SUB_COUNT + (e - SUB_BITS) * SUB_COUNT +
           ((v >> (e - SUB_BITS)) & (SUB_COUNT - 1));
}

/* The largest value that falls in bucket b. */
static uint64_t bucket_upper(unsigned b)
{
    unsigned e, sub;

    if (b < SUB_COUNT) {
        return b;
    }
    e = (b - SUB_COUNT) / SUB_COUNT + SUB_BITS;
    sub = (b - SUB_COUNT) % SUB_COUNT;
    return (((uint64_t)SUB_COUNT + sub + 1) << (e - SUB_BITS)) - 1;
}

LatHist *lat_hist_new(void)
{
    LatHist *h = g_new(LatHist, 1);

    lat_hist_reset(h);
    return h;
}

void lat_hist_free(LatHist *h)
{
    g_free(h);
}

void lat_hist_reset(LatHist *h)
{
    memset(h, 0, sizeof(*h));
    h->min = UINT64_MAX;
}

void lat_hist_add(LatHist *h, uint64_t ns)
{
    if (ns > VALUE_MAX) {
        ns = VALUE_MAX;
    }
    h->buckets[bucket_of(ns)]++;
    h->count++;
    h->sum += (double)ns;
    h->min = MIN(h->min, ns);
    h->max = MAX(h->max, ns);
}

void lat_hist_merge(LatHist *dst, const LatHist *src)
{
    for (unsigned b = 0; b < NBUCKETS; b++) {
        dst->buckets[b] += src->buckets[b];
    }
    dst->count += src->count;
    dst->sum += src->sum;
    dst->min = MIN(dst->min, src->min);
    dst->max = MAX(dst->max, src->max);
}

uint64_t lat_hist_count(const LatHist *h)
{
    return h->count;
}

uint64_t lat_hist_min(const LatHist *h)
{
    return h->count ? h->min : 0;
}

uint64_t lat_hist_max(const LatHist *h)
{
    return h->max;
}

double lat_hist_mean(const LatHist *h)
{
    return h->count ? h->sum / (double)h->count : 0.0;
}

uint64_t lat_hist_percentile(const LatHist *h, double p)
{
    uint64_t rank, seen = 0;
    double x;

    if (!h->count) {
        return 0;
    }
    p = CLAMP(p, 0.0, 100.0);
    /*
     * Decimal percentiles are not exact doubles: 99.9 / 100 * 1000 is
     * 999.0000000000001, whose ceil would be rank 1000.  Discount a
     * relative 1e-12 (far above the rounding error, far below one rank
     * for any count under 10^12).
     */
    x = p / 100.0 * (double)h->count;
    rank = (uint64_t)ceil(x - x * 1e-12);
    rank = CLAMP(rank, 1, h->count);
    for (unsigned b = 0; b < NBUCKETS; b++) {
        seen += h->buckets[b];
        if (seen >= rank) {
            return MIN(bucket_upper(b), h->max);
        }
    }
    return h->max;
}

/*
 * Fraction of the samples that are <= v, counting the whole bucket that
 * holds v (so within a bucket of the truth, like the percentiles; and
 * never 0 from the min on, which a count of only the buckets ending at or
 * below v would give for a min inside its bucket).
 */
static double fraction_at(const LatHist *h, uint64_t v)
{
    uint64_t seen = 0;
    unsigned last = bucket_of(MIN(v, VALUE_MAX));

    for (unsigned b = 0; b <= last; b++) {
        seen += h->buckets[b];
    }
    return (double)seen / (double)h->count;
}

size_t lat_hist_cdf(const LatHist *h, double *ns, double *frac,
                    size_t max_points)
{
    size_t nonempty = 0, n = 0;
    uint64_t seen = 0;
    double lo, hi;

    if (!h->count || max_points == 0) {
        return 0;
    }
    for (unsigned b = 0; b < NBUCKETS; b++) {
        nonempty += h->buckets[b] != 0;
    }
    if (nonempty <= max_points) {
        /* Every non-empty bucket, at its upper edge (the last at max). */
        for (unsigned b = 0; b < NBUCKETS; b++) {
            if (!h->buckets[b]) {
                continue;
            }
            seen += h->buckets[b];
            ns[n] = (double)MIN(bucket_upper(b), h->max);
            frac[n] = (double)seen / (double)h->count;
            n++;
        }
        return n;
    }
    /*
     * Too many: sample at values spread evenly in log(value), which is
     * how latency CDFs are plotted.  Keep the points strictly increasing.
     */
    lo = (double)MAX(h->min, 1);
    hi = (double)MAX(h->max, 1);
    for (size_t k = 0; k + 1 < max_points; k++) {
        double v = lo * pow(hi / lo, (double)k / (double)(max_points - 1));
        uint64_t iv = (uint64_t)v;

        if (n && (double)iv <= ns[n - 1]) {
            continue;
        }
        ns[n] = (double)iv;
        frac[n] = fraction_at(h, iv);
        n++;
    }
    if (n && ns[n - 1] >= (double)h->max) {
        n--;
    }
    ns[n] = (double)h->max;
    frac[n] = 1.0;
    return n + 1;
}
