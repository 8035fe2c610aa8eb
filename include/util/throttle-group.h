/*
 * Throttle groups: named I/O limits that several block nodes share.
 *
 * A throttle group is an object (--object throttle-group,id=ID,...,
 * object-add) with QEMU's properties: x-iops-total, x-iops-read,
 * x-iops-write, x-bps-total, x-bps-read, x-bps-write, each also with
 * -max (the burst rate) and -max-length (how many seconds a burst may
 * last), and x-iops-size; or the same values as members of one object,
 * "limits" ({"iops-total": 1000, ...}, limits.iops-total=1000).  A
 * limit of 0 is no limit.  qom-set changes them live (all of "limits",
 * or one x- property); qom-get reads them.  Errors name the property.
 *
 * Throttle filter nodes (block/throttle.c) take the group's limits as
 * their own: every node of a group draws from the same buckets
 * (util/throttle.h), whatever IOThread its requests run in.  The group
 * keeps those buckets under its lock, and the waiting members of each
 * direction (read, write) in a ring that block/throttle.c serves in turn
 * (see there).
 *
 * Lifecycle, properties and lookups are main-thread functions; the lock,
 * the state and the rings below are for the throttle filter, in any
 * thread.
 */
#ifndef SPINDLE_UTIL_THROTTLE_GROUP_H
#define SPINDLE_UTIL_THROTTLE_GROUP_H

#include <stdatomic.h>
#include <stdbool.h>
#include <glib.h>
#include <json-glib/json-glib.h>
#include "util/aio.h"
#include "util/error.h"
#include "util/opts.h"
#include "util/throttle.h"

/* The object type's name (--object, object-add). */
#define THROTTLE_GROUP_TYPE "throttle-group"

typedef struct ThrottleGroup ThrottleGroup;
typedef struct ThrottleGroupMember ThrottleGroupMember;

/*
 * One user of a group in one AioContext (a throttle node's queue).  The
 * user embeds it and sets wake_bh: the group schedules it (from any
 * thread) when the member is first in line and should look again at the
 * buckets: after a change of limits, or when the member before it in the
 * ring has taken its turn.
 */
struct ThrottleGroupMember {
    QEMUBH *wake_bh;
    /* Under the group's lock: */
    ThrottleGroupMember *next[2];   /* in tg->ring[is_write] */
    bool queued[2];                 /* in that ring */
};

struct ThrottleGroup {
    char *id;
    unsigned users;              /* nodes using it; main thread */
    /*
     * Whether reads ([0]) and writes ([1]) are limited: written under
     * lock (a change of limits), read without it on every request so
     * that a group without limits costs a load.  Relaxed: a request that
     * reads a stale value is throttled by the old limits, as if it had
     * come a moment earlier.
     */
    atomic_bool limited[2];
    GMutex lock;
    /* Under lock: */
    ThrottleState ts;
    ThrottleGroupMember *ring[2];   /* members with waiting requests */
    ThrottleGroupMember *ring_tail[2];
};

/*
 * Create a group from the options of --object or object-add: qom-type
 * (if present, "throttle-group"), id, the x- properties and limits.  The
 * id must be new (ids_taken says whether another object type has it:
 * may be NULL).  Returns the group, registered; NULL with errp set.
 */
ThrottleGroup *throttle_group_create(Opts *opts,
                                     bool (*ids_taken)(const char *id),
                                     Error **errp);

/* The group called id, or NULL. */
ThrottleGroup *throttle_group_lookup(const char *id);

/*
 * Delete tg (object-del).  Refused while a node uses it (the error names
 * how many).
 */
bool throttle_group_destroy(ThrottleGroup *tg, Error **errp);

/* Delete every group no node uses (the daemon's exit). */
void throttle_group_destroy_all(void);

/* A node starts / stops using tg (main thread). */
void throttle_group_add_user(ThrottleGroup *tg);
void throttle_group_remove_user(ThrottleGroup *tg);

/*
 * qom-set: property name ("limits", "x-iops-total", ...) to value (a
 * JSON object for limits: the members given change, the others keep
 * their values; an integer otherwise).  The new limits apply at once:
 * the buckets start again empty and the members waiting are woken to
 * look again.  On error nothing changes.
 */
bool throttle_group_set(ThrottleGroup *tg, const char *name,
                        JsonNode *value, Error **errp);

/* qom-get: the value (a new node), or NULL with errp set. */
JsonNode *throttle_group_get(ThrottleGroup *tg, const char *name,
                             Error **errp);

/* The properties for --object throttle-group,help (caller frees). */
char *throttle_group_help(void);

/* The current limits (a copy).  Any thread. */
void throttle_group_get_config(ThrottleGroup *tg, ThrottleConfig *cfg);

/*
 * The ring of waiting members of one direction.  Caller holds tg->lock.
 * Append m (not queued yet) at the tail; take the head off (returned,
 * NULL if empty).
 */
void throttle_group_ring_append(ThrottleGroup *tg, ThrottleGroupMember *m,
                                bool is_write);
ThrottleGroupMember *throttle_group_ring_pop(ThrottleGroup *tg,
                                             bool is_write);

#endif
