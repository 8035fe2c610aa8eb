/*
 * Throttle groups: the object (--object throttle-group, object-add,
 * qom-set, qom-get, object-del) and its shared buckets.
 *
 * Theory of operation.  A group is a name, a ThrottleState (the buckets,
 * util/throttle.c) and two rings of waiting members, all under one
 * mutex, plus two flags read without it that say whether reads and
 * writes are limited at all: a throttle node whose group limits nothing
 * passes requests on after one relaxed load.
 *
 * Options are read the same way at creation and at qom-set: into a copy
 * of the current ThrottleConfig (util/throttle.c's table names every
 * value), checked as a whole, then swapped in under the lock.  A new
 * config empties the buckets (as QEMU does) and wakes the first member
 * waiting in each ring, which looks at the buckets again and re-arms its
 * timer for the new limits (block/throttle.c).
 *
 * The registry of groups is the main thread's; so are users (how many
 * throttle nodes use a group, which keeps object-del from pulling the
 * buckets from under them).
 */
#include <inttypes.h>
#include <string.h>
#include <glib.h>

#include "util/clock.h"
#include "util/cutils.h"
#include "util/main-thread.h"
#include "util/throttle-group.h"

/* Every group by id (keys: their id strings); main thread only. */
static GHashTable *throttle_groups;

ThrottleGroup *throttle_group_lookup(const char *id)
{
    assert_main_thread();
    return throttle_groups ? g_hash_table_lookup(throttle_groups, id) : NULL;
}

/*
 * Read the values present in o into cfg: keys are key_prefix + a name of
 * throttle_params ("x-iops-total", or "iops-total" in limits' own Opts),
 * messages name them with msg_prefix.
 */
static bool throttle_group_parse(Opts *o, const char *key_prefix,
                                 const char *msg_prefix, ThrottleConfig *cfg,
                                 Error **errp)
{
    for (const ThrottleParam *p = throttle_params; p->name; p++) {
        g_autofree char *key = g_strconcat(key_prefix, p->name, NULL);
        int64_t v;

        if (!opts_has(o, key)) {
            continue;
        }
        if (!opts_get_int(o, key, INT64_MIN, INT64_MAX, 0, &v, errp) ||
            !throttle_param_set(cfg, p, msg_prefix, v, errp)) {
            return false;
        }
    }
    return true;
}

/* The x- properties and limits of o into cfg, checked as a whole. */
static bool throttle_group_parse_all(Opts *o, ThrottleConfig *cfg,
                                     Error **errp)
{
    g_autoptr(Opts) limits = NULL;

    if (!throttle_group_parse(o, "x-", "x-", cfg, errp)) {
        return false;
    }
    if (opts_has(o, "limits")) {
        limits = opts_get_child(o, "limits");
        if (!limits) {
            error_setg(errp, "Parameter 'limits' expects an object "
                       "(limits.iops-total=N or {\"iops-total\": N})");
            return false;
        }
        if (!throttle_group_parse(limits, "", "limits.", cfg, errp) ||
            !opts_check_unused(limits, NULL, errp)) {
            return false;
        }
    }
    /* Rules between values: named the way the user gave them. */
    return opts_check_unused(o, NULL, errp) &&
           throttle_config_check(cfg, limits ? "limits." : "x-", errp);
}

/* Wake the first member of a ring (it looks at the buckets again). */
static void throttle_group_wake_head(ThrottleGroup *tg, bool is_write)
{
    if (tg->ring[is_write]) {
        aio_bh_schedule(tg->ring[is_write]->wake_bh);
    }
}

/* Make cfg tg's limits, with empty buckets; wake who waits. */
static void throttle_group_apply(ThrottleGroup *tg, const ThrottleConfig *cfg)
{
    g_mutex_lock(&tg->lock);
    throttle_state_init(&tg->ts, cfg, clock_now_ns());
    for (int w = 0; w < 2; w++) {
        atomic_store_explicit(&tg->limited[w], throttle_config_limits(cfg, w),
                              memory_order_relaxed);
        throttle_group_wake_head(tg, w);
    }
    g_mutex_unlock(&tg->lock);
}

ThrottleGroup *throttle_group_create(Opts *opts,
                                     bool (*ids_taken)(const char *id),
                                     Error **errp)
{
    const char *type, *id;
    ThrottleConfig cfg;
    ThrottleGroup *tg;

    assert_main_thread();
    if (!opts_get_str(opts, "qom-type", THROTTLE_GROUP_TYPE, &type, errp) ||
        !opts_get_str(opts, "id", NULL, &id, errp)) {
        return NULL;
    }
    g_assert(!strcmp(type, THROTTLE_GROUP_TYPE));
    if (!id || !*id) {
        error_setg(errp, THROTTLE_GROUP_TYPE ": Parameter 'id' is missing");
        return NULL;
    }
    if (!id_chars_valid(id)) {
        error_setg(errp, THROTTLE_GROUP_TYPE ": Parameter 'id' expects an "
                   "identifier (letters, digits, '-', '.', '_'), got '%s'",
                   id);
        return NULL;
    }
    if (throttle_group_lookup(id) || (ids_taken && ids_taken(id))) {
        error_setg(errp, THROTTLE_GROUP_TYPE ": an object with id '%s' "
                   "already exists", id);
        return NULL;
    }
    throttle_config_init(&cfg);
    if (!throttle_group_parse_all(opts, &cfg, errp)) {
        error_prepend(errp, THROTTLE_GROUP_TYPE " '%s': ", id);
        return NULL;
    }
    tg = g_new0(ThrottleGroup, 1);
    tg->id = g_strdup(id);
    g_mutex_init(&tg->lock);
    throttle_group_apply(tg, &cfg);
    if (!throttle_groups) {
        throttle_groups = g_hash_table_new(g_str_hash, g_str_equal);
    }
    g_hash_table_insert(throttle_groups, tg->id, tg);
    return tg;
}

/* tg, already out of the registry. */
static void throttle_group_free(ThrottleGroup *tg)
{
    g_mutex_clear(&tg->lock);
    g_free(tg->id);
    g_free(tg);
}

bool throttle_group_destroy(ThrottleGroup *tg, Error **errp)
{
    assert_main_thread();
    if (tg->users) {
        error_setg(errp, THROTTLE_GROUP_TYPE " '%s' is in use by %u throttle "
                   "node%s", tg->id, tg->users, tg->users == 1 ? "" : "s");
        return false;
    }
    g_hash_table_remove(throttle_groups, tg->id);
    throttle_group_free(tg);
    return true;
}

void throttle_group_destroy_all(void)
{
    GHashTableIter iter;
    gpointer tg;

    assert_main_thread();
    if (!throttle_groups) {
        return;
    }
    g_hash_table_iter_init(&iter, throttle_groups);
    while (g_hash_table_iter_next(&iter, NULL, &tg)) {
        if (!((ThrottleGroup *)tg)->users) {
            g_hash_table_iter_remove(&iter);
            throttle_group_free(tg);
        }
    }
}

void throttle_group_add_user(ThrottleGroup *tg)
{
    assert_main_thread();
    tg->users++;
}

void throttle_group_remove_user(ThrottleGroup *tg)
{
    assert_main_thread();
    g_assert(tg->users > 0);
    tg->users--;
}

void throttle_group_get_config(ThrottleGroup *tg, ThrottleConfig *cfg)
{
    g_mutex_lock(&tg->lock);
    *cfg = tg->ts.cfg;
    g_mutex_unlock(&tg->lock);
}

/* "x-iops-total" -> its parameter; NULL for anything else. */
static const ThrottleParam *throttle_group_x_param(const char *name)
{
    return g_str_has_prefix(name, "x-") ? throttle_param_find(name + 2)
                                        : NULL;
}

static bool throttle_group_known(const char *name, Error **errp)
{
    if (strcmp(name, "limits") && !throttle_group_x_param(name)) {
        error_setg(errp, "Property '" THROTTLE_GROUP_TYPE ".%s' not found "
                   "(limits, x-iops-total, x-bps-read-max, ...: see --object "
                   THROTTLE_GROUP_TYPE ",help)", name);
        return false;
    }
    return true;
}

bool throttle_group_set(ThrottleGroup *tg, const char *name,
                        JsonNode *value, Error **errp)
{
    g_autoptr(JsonObject) wrap = json_object_new();
    g_autoptr(Opts) opts = NULL;
    ThrottleConfig cfg;

    assert_main_thread();
    if (!throttle_group_known(name, errp)) {
        return false;
    }
    /* {name: value}, read as at creation: the messages name the key. */
    json_object_set_member(wrap, name, json_node_copy(value));
    opts = opts_new_from_object(wrap);
    throttle_group_get_config(tg, &cfg);
    if (!throttle_group_parse_all(opts, &cfg, errp)) {
        error_prepend(errp, THROTTLE_GROUP_TYPE " '%s': ", tg->id);
        return false;
    }
    throttle_group_apply(tg, &cfg);
    return true;
}

JsonNode *throttle_group_get(ThrottleGroup *tg, const char *name,
                             Error **errp)
{
    const ThrottleParam *x = throttle_group_x_param(name);
    JsonObject *limits;
    ThrottleConfig cfg;

    assert_main_thread();
    if (!throttle_group_known(name, errp)) {
        return NULL;
    }
    throttle_group_get_config(tg, &cfg);
    if (x) {
        return json_node_init_int(json_node_alloc(),
                                  *throttle_param_field(&cfg, x));
    }
    limits = json_object_new();
    for (const ThrottleParam *p = throttle_params; p->name; p++) {
        json_object_set_int_member(limits, p->name,
                                   *throttle_param_field(&cfg, p));
    }
    return json_node_init_object(json_node_alloc(), limits);
}

char *throttle_group_help(void)
{
    GString *out = g_string_new(THROTTLE_GROUP_TYPE " options:\n"
                                "  id=<identifier>        required\n");

    for (const ThrottleParam *p = throttle_params; p->name; p++) {
        g_autofree char *key = g_strdup_printf("x-%s=<int>", p->name);

        g_string_append_printf(out, "  %s\n", key);
    }
    g_string_append(out, "  limits.<name>=<int>    the same without 'x-' "
                    "(limits.iops-total=...)\n");
    return g_string_free(out, FALSE);
}

void throttle_group_ring_append(ThrottleGroup *tg, ThrottleGroupMember *m,
                                bool is_write)
{
    g_assert(!m->queued[is_write]);
    m->queued[is_write] = true;
    m->next[is_write] = NULL;
    if (tg->ring_tail[is_write]) {
        tg->ring_tail[is_write]->next[is_write] = m;
    } else {
        tg->ring[is_write] = m;
    }
    tg->ring_tail[is_write] = m;
}

ThrottleGroupMember *throttle_group_ring_pop(ThrottleGroup *tg,
                                             bool is_write)
{
    ThrottleGroupMember *m = tg->ring[is_write];

    if (m) {
        tg->ring[is_write] = m->next[is_write];
        if (!tg->ring[is_write]) {
            tg->ring_tail[is_write] = NULL;
        }
        m->queued[is_write] = false;
        m->next[is_write] = NULL;
    }
    return m;
}
