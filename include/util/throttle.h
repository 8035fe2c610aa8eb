/*
 * Throttling: leaky buckets that limit I/O operations and bytes per second.
 *
 * A ThrottleConfig holds one limit per bucket (total, read and write, each
 * for operations and for bytes) with QEMU's meaning:
 *   avg         the average rate, units per second (0: no limit);
 *   max         the burst rate (0: none; then short bursts of avg / 10
 *               units are still allowed);
 *   max_length  how many seconds a burst at max may last (default 1);
 * plus op_size (x-iops-size): a request larger than op_size bytes counts
 * as size / op_size operations.
 *
 * A ThrottleState is the running buckets of one config.  A bucket holds
 * up to max * max_length units (avg / 10 without max) and drains at avg
 * per second; a request may start when its buckets are not over that
 * size, and then adds its units (so one large request may overfill a
 * bucket: the next waits longer).  A bucket with max_length > 1 also has
 * a burst level that drains at max and holds max / 10 units, so a burst
 * runs at max, not faster.
 *
 * Every function takes the time (CLOCK_MONOTONIC ns, clock_now_ns()) from
 * its caller, so tests drive it with a fake clock; nothing here makes a
 * syscall, allocates or locks.  A ThrottleState is not thread-safe: its
 * owner (a throttle group) holds a lock around these calls.
 */
#ifndef SPINDLE_UTIL_THROTTLE_H
#define SPINDLE_UTIL_THROTTLE_H

#include <stdbool.h>
#include <stdint.h>
#include "util/error.h"

typedef enum ThrottleBucketType {
    THROTTLE_IOPS_TOTAL,
    THROTTLE_IOPS_READ,
    THROTTLE_IOPS_WRITE,
    THROTTLE_BPS_TOTAL,
    THROTTLE_BPS_READ,
    THROTTLE_BPS_WRITE,
    THROTTLE_BUCKETS,
} ThrottleBucketType;

/* The largest avg and max QEMU accepts (1e15). */
#define THROTTLE_VALUE_MAX 1000000000000000LL

typedef struct ThrottleLimit {
    int64_t avg;
    int64_t max;
    int64_t max_length;          /* seconds, >= 1 */
} ThrottleLimit;

typedef struct ThrottleConfig {
    ThrottleLimit limit[THROTTLE_BUCKETS];
    int64_t op_size;             /* x-iops-size, bytes (0: off) */
} ThrottleConfig;

typedef struct ThrottleBucket {
    double level;                /* units in the bucket */
    double burst_level;          /* ... in the burst bucket (max_length > 1) */
} ThrottleBucket;

typedef struct ThrottleState {
    ThrottleConfig cfg;
    ThrottleBucket bucket[THROTTLE_BUCKETS];
    int64_t last_leak_ns;
} ThrottleState;

/*
 * Where a property of a throttle group lives in a ThrottleConfig: QEMU's
 * names ("iops-total-max", ...), the member of ThrottleLimits and, with
 * "x-" in front, the property of a throttle-group object.
 */
typedef enum ThrottleField {
    THROTTLE_FIELD_AVG,
    THROTTLE_FIELD_MAX,
    THROTTLE_FIELD_MAX_LENGTH,
    THROTTLE_FIELD_OP_SIZE,
} ThrottleField;

typedef struct ThrottleParam {
    const char *name;            /* "iops-total-max" */
    ThrottleBucketType bucket;   /* (not for THROTTLE_FIELD_OP_SIZE) */
    ThrottleField field;
} ThrottleParam;

/* Every parameter in QEMU's order of ThrottleLimits (iops-total,
 * iops-total-max, iops-total-max-length, iops-read, ..., bps-write-max-
 * length, iops-size); the entry after the last has name NULL. */
extern const ThrottleParam throttle_params[];

/* The parameter called name (without "x-"), or NULL.  Any thread. */
const ThrottleParam *throttle_param_find(const char *name);

/* A pointer to p's value in cfg. */
int64_t *throttle_param_field(ThrottleConfig *cfg, const ThrottleParam *p);

/*
 * Set p in cfg to value, checking its own range (avg and max: 0 to
 * THROTTLE_VALUE_MAX; max_length: 1 to UINT32_MAX; op_size: 0 and up).
 * prefix ("x-" or "limits.") goes in front of the name in the error.
 */
bool throttle_param_set(ThrottleConfig *cfg, const ThrottleParam *p,
                        const char *prefix, int64_t value, Error **errp);

/* No limits, burst lengths of 1. */
void throttle_config_init(ThrottleConfig *cfg);

/*
 * Check the rules between the values, as QEMU does: a total limit and a
 * read or write limit of the same kind together, a max without its avg,
 * a max below its avg, a max_length above 1 without a max.  The error
 * names the properties (with prefix in front).
 */
bool throttle_config_check(const ThrottleConfig *cfg, const char *prefix,
                           Error **errp);

/* Whether cfg limits reads (is_write false) or writes. */
bool throttle_config_limits(const ThrottleConfig *cfg, bool is_write);

/* Start state for cfg (copied) at now: empty buckets. */
void throttle_state_init(ThrottleState *ts, const ThrottleConfig *cfg,
                         int64_t now);

/*
 * Drain the buckets up to now, then how long a request of that direction
 * must wait before it may start: 0 if it may start now.
 */
int64_t throttle_wait_ns(ThrottleState *ts, bool is_write, int64_t now);

/* Count a request of bytes that starts (after throttle_wait_ns() said 0). */
void throttle_account(ThrottleState *ts, bool is_write, uint64_t bytes);

#endif
