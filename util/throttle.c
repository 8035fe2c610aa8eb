/*
 * Throttling: the leaky buckets and their configuration.
 *
 * Theory of operation.  Each of the six buckets (operations and bytes;
 * total, read, write) is a level of units that a request adds to when it
 * starts and that drains at the bucket's average rate.  The bucket's size
 * is what may pile up before requests have to wait: max * max_length
 * units with a burst rate, avg / 10 without one (so that every other
 * request is not delayed at a steady rate just under the limit).  A
 * request waits for as long as the fullest of its buckets needs to drain
 * back to its size; it then adds its units, even if that overfills the
 * bucket, so a large request is never stuck behind its own size.
 *
 * Bursts longer than a second also need their rate capped at max: the
 * burst level drains at max and holds max / 10 units, and a request waits
 * for it too.  With max_length 1 the main bucket (max units, draining at
 * avg) already caps a burst at about max in a second.
 *
 * Times come from the caller (a fake clock in tests); buckets drain only
 * when asked (throttle_wait_ns()), by the time since the last drain.
 * Levels are doubles so that a drain of a fraction of a unit is not lost.
 *
 * The parameter table is the one description of the names: the group's
 * "x-" properties, the "limits" members, their ranges and the messages.
 */
#include <inttypes.h>
#include <stddef.h>
#include <string.h>
#include <glib.h>

#include "util/throttle.h"

#define NS_PER_SEC 1000000000.0

#define P(n, b, f) { .name = n, .bucket = b, .field = f }
#define P3(n, b) \
    P(n, b, THROTTLE_FIELD_AVG), P(n "-max", b, THROTTLE_FIELD_MAX), \
    P(n "-max-length", b, THROTTLE_FIELD_MAX_LENGTH)

const ThrottleParam throttle_params[] = {
    P3("iops-total", THROTTLE_IOPS_TOTAL),
    P3("iops-read", THROTTLE_IOPS_READ),
    P3("iops-write", THROTTLE_IOPS_WRITE),
    P3("bps-total", THROTTLE_BPS_TOTAL),
    P3("bps-read", THROTTLE_BPS_READ),
    P3("bps-write", THROTTLE_BPS_WRITE),
    P("iops-size", 0, THROTTLE_FIELD_OP_SIZE),
    { .name = NULL },
};

#undef P3
#undef P

/* The names of the buckets, for messages: "iops-total". */
static const char *const throttle_bucket_names[THROTTLE_BUCKETS] = {
    "iops-total", "iops-read", "iops-write",
    "bps-total", "bps-read", "bps-write",
};

const ThrottleParam *throttle_param_find(const char *name)
{
    for (const ThrottleParam *p = throttle_params; p->name; p++) {
        if (!strcmp(p->name, name)) {
            return p;
        }
    }
    return NULL;
}

int64_t *throttle_param_field(ThrottleConfig *cfg, const ThrottleParam *p)
{
    ThrottleLimit *l = &cfg->limit[p->bucket];

    switch (p->field) {
    case THROTTLE_FIELD_AVG:
        return &l->avg;
    case THROTTLE_FIELD_MAX:
        return &l->max;
    case THROTTLE_FIELD_MAX_LENGTH:
        return &l->max_length;
    case THROTTLE_FIELD_OP_SIZE:
        break;
    }
    return &cfg->op_size;
}

bool throttle_param_set(ThrottleConfig *cfg, const ThrottleParam *p,
                        const char *prefix, int64_t value, Error **errp)
{
    int64_t min = 0, max = THROTTLE_VALUE_MAX;

    if (p->field == THROTTLE_FIELD_MAX_LENGTH) {
        min = 1;
        max = UINT32_MAX;
    } else if (p->field == THROTTLE_FIELD_OP_SIZE) {
        max = INT64_MAX;
    }
    if (value < min || value > max) {
        error_setg(errp, "Parameter '%s%s' expects a value from %" PRId64
                   " to %" PRId64 ", got %" PRId64, prefix, p->name, min, max,
                   value);
        return false;
    }
    *throttle_param_field(cfg, p) = value;
    return true;
}

void throttle_config_init(ThrottleConfig *cfg)
{
    *cfg = (ThrottleConfig) { 0 };
    for (int i = 0; i < THROTTLE_BUCKETS; i++) {
        cfg->limit[i].max_length = 1;
    }
}

/* A total limit and a read or write one of the same kind (field f). */
static bool throttle_check_total(const ThrottleConfig *cfg, int total,
                                 const char *prefix, const char *suffix,
                                 bool use_max, Error **errp)
{
    for (int i = total + 1; i <= total + 2; i++) {
        int64_t t = use_max ? cfg->limit[total].max : cfg->limit[total].avg;
        int64_t o = use_max ? cfg->limit[i].max : cfg->limit[i].avg;

        if (t && o) {
            error_setg(errp, "Parameters '%s%s%s' and '%s%s%s' cannot be "
                       "used at the same time (a total limit, or read and "
                       "write limits)", prefix, throttle_bucket_names[total],
                       suffix, prefix, throttle_bucket_names[i], suffix);
            return false;
        }
    }
    return true;
}

bool throttle_config_check(const ThrottleConfig *cfg, const char *prefix,
                           Error **errp)
{
    for (int total = 0; total < THROTTLE_BUCKETS; total += 3) {
        if (!throttle_check_total(cfg, total, prefix, "", false, errp) ||
            !throttle_check_total(cfg, total, prefix, "-max", true, errp)) {
            return false;
        }
    }
    for (int i = 0; i < THROTTLE_BUCKETS; i++) {
        const ThrottleLimit *l = &cfg->limit[i];
        const char *n = throttle_bucket_names[i];

        if (l->max && !l->avg) {
            error_setg(errp, "Parameter '%s%s-max' needs '%s%s' (the average "
                       "rate the burst comes back to)", prefix, n, prefix, n);
            return false;
        }
        if (l->max && l->max < l->avg) {
            error_setg(errp, "Parameter '%s%s-max' (%" PRId64 ") cannot be "
                       "lower than '%s%s' (%" PRId64 ")", prefix, n, l->max,
                       prefix, n, l->avg);
            return false;
        }
        if (l->max_length > 1 && !l->max) {
            error_setg(errp, "Parameter '%s%s-max-length' needs '%s%s-max' "
                       "(the burst rate)", prefix, n, prefix, n);
            return false;
        }
    }
    return true;
}

bool throttle_config_limits(const ThrottleConfig *cfg, bool is_write)
{
    int dir = is_write ? 2 : 1;

    return cfg->limit[THROTTLE_IOPS_TOTAL].avg ||
           cfg->limit[THROTTLE_BPS_TOTAL].avg ||
           cfg->limit[THROTTLE_IOPS_TOTAL + dir].avg ||
           cfg->limit[THROTTLE_BPS_TOTAL + dir].avg;
}

void throttle_state_init(ThrottleState *ts, const ThrottleConfig *cfg,
                         int64_t now)
{
    *ts = (ThrottleState) { .cfg = *cfg, .last_leak_ns = now };
}

static void throttle_leak(ThrottleState *ts, int64_t now)
{
    double dt = now - ts->last_leak_ns;

    if (dt <= 0) {
        return;
    }
    ts->last_leak_ns = now;
    for (int i = 0; i < THROTTLE_BUCKETS; i++) {
        const ThrottleLimit *l = &ts->cfg.limit[i];
        ThrottleBucket *b = &ts->bucket[i];

        b->level = MAX(b->level - l->avg * dt / NS_PER_SEC, 0.0);
        if (l->max_length > 1) {
            b->burst_level = MAX(b->burst_level - l->max * dt / NS_PER_SEC,
                                 0.0);
        }
    }
}

/* How long bucket i needs to drain to where a request may start. */
static int64_t throttle_bucket_wait(const ThrottleState *ts, int i)
{
    const ThrottleLimit *l = &ts->cfg.limit[i];
    const ThrottleBucket *b = &ts->bucket[i];
    double size, extra;

    if (!l->avg) {
        return 0;
    }
    size = l->max ? (double)l->max * l->max_length : l->avg / 10.0;
    extra = b->level - size;
    if (extra > 0) {
        /* Round up: a wake-up a nanosecond early would find it still full. */
        return (int64_t)(extra * NS_PER_SEC / l->avg) + 1;
    }
    if (l->max_length > 1) {
        extra = b->burst_level - l->max / 10.0;
        if (extra > 0) {
            return (int64_t)(extra * NS_PER_SEC / l->max) + 1;
        }
    }
    return 0;
}

int64_t throttle_wait_ns(ThrottleState *ts, bool is_write, int64_t now)
{
    const int buckets[] = {
        THROTTLE_IOPS_TOTAL, THROTTLE_BPS_TOTAL,
        is_write ? THROTTLE_IOPS_WRITE : THROTTLE_IOPS_READ,
        is_write ? THROTTLE_BPS_WRITE : THROTTLE_BPS_READ,
    };
    int64_t wait = 0;

    throttle_leak(ts, now);
    for (size_t i = 0; i < G_N_ELEMENTS(buckets); i++) {
        wait = MAX(wait, throttle_bucket_wait(ts, buckets[i]));
    }
    return wait;
}

/* Add units to bucket i (and its burst level when it has one). */
static void throttle_fill(ThrottleState *ts, int i, double units)
{
    ts->bucket[i].level += units;
    if (ts->cfg.limit[i].max_length > 1) {
        ts->bucket[i].burst_level += units;
    }
}

void throttle_account(ThrottleState *ts, bool is_write, uint64_t bytes)
{
    int dir = is_write ? 2 : 1;
    double ops = 1.0;

    if (ts->cfg.op_size && bytes > (uint64_t)ts->cfg.op_size) {
        ops = (double)bytes / ts->cfg.op_size;
    }
    throttle_fill(ts, THROTTLE_IOPS_TOTAL, ops);
    throttle_fill(ts, THROTTLE_IOPS_TOTAL + dir, ops);
    throttle_fill(ts, THROTTLE_BPS_TOTAL, bytes);
    throttle_fill(ts, THROTTLE_BPS_TOTAL + dir, bytes);
}
