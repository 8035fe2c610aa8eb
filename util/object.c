/*
 * Objects: the table of types that --object and object-add create.
 *
 * Each type brings its own parser and messages (util/iothread.c,
 * util/throttle-group.c); this file picks the type from the option and
 * keeps ids unique across types.  The option is parsed once here to
 * find qom-type and id; text that does not parse, or names no type we
 * know, goes to the iothread parser, whose messages say what is wrong
 * (and list the types).
 */
#include <string.h>
#include <glib.h>

#include "util/iothread.h"
#include "util/main-thread.h"
#include "util/object.h"
#include "util/throttle-group.h"

typedef struct ObjectType {
    const char *name;
    /* Create from --object's text (arg), already parsed as opts. */
    bool (*create)(const char *arg, Opts *opts, Error **errp);
    bool (*exists)(const char *id);
    /* The text of --object TYPE,help (caller frees). */
    char *(*help)(void);
} ObjectType;

static bool object_iothread_create(const char *arg, Opts *opts, Error **errp)
{
    return iothread_create_from_option(arg, errp) != NULL;
}

static bool object_iothread_exists(const char *id)
{
    return iothread_lookup(id) != NULL;
}

static char *object_iothread_help(void)
{
    return iothread_option_help("iothread,help");
}

static bool object_throttle_group_create(const char *arg, Opts *opts,
                                         Error **errp)
{
    return throttle_group_create(opts, object_id_taken, errp) != NULL;
}

static bool object_throttle_group_exists(const char *id)
{
    return throttle_group_lookup(id) != NULL;
}

/* The first is the fallback for text that names no known type. */
static const ObjectType object_types[] = {
    { "iothread", object_iothread_create, object_iothread_exists,
      object_iothread_help },
    { THROTTLE_GROUP_TYPE, object_throttle_group_create,
      object_throttle_group_exists, throttle_group_help },
};

static const ObjectType *object_type_find(const char *name)
{
    for (size_t i = 0; name && i < G_N_ELEMENTS(object_types); i++) {
        if (!strcmp(object_types[i].name, name)) {
            return &object_types[i];
        }
    }
    return NULL;
}

bool object_id_taken(const char *id)
{
    for (size_t i = 0; i < G_N_ELEMENTS(object_types); i++) {
        if (object_types[i].exists(id)) {
            return true;
        }
    }
    return false;
}

/* An id that an object of another type than t has: an error. */
static bool object_check_id(const ObjectType *t, const char *id,
                            Error **errp)
{
    for (size_t i = 0; id && i < G_N_ELEMENTS(object_types); i++) {
        const ObjectType *other = &object_types[i];

        if (other != t && other->exists(id)) {
            error_setg(errp, "%s: id '%s' is already the id of a%s %s",
                       t->name, id, other->name[0] == 'i' ? "n" : "",
                       other->name);
            return false;
        }
    }
    return true;
}

bool object_create_from_option(const char *arg, Error **errp)
{
    g_autoptr(Opts) opts = opts_parse(arg, "qom-type", NULL);
    const char *type = NULL, *id = NULL;
    const ObjectType *t;

    assert_main_thread();
    if (opts) {
        opts_get_str(opts, "qom-type", NULL, &type, NULL);
        opts_get_str(opts, "id", NULL, &id, NULL);
    }
    t = object_type_find(type);
    if (!t) {
        /* Its parser reports what is wrong with the text or the type. */
        return object_types[0].create(arg, opts, errp);
    }
    return object_check_id(t, id, errp) && t->create(arg, opts, errp);
}

bool object_add_json(JsonObject *args, Error **errp)
{
    g_autoptr(Opts) opts = opts_new_from_object(args);
    const char *type = NULL;

    assert_main_thread();
    if (!opts_get_str(opts, "qom-type", NULL, &type, errp)) {
        return false;
    }
    if (!type || strcmp(type, THROTTLE_GROUP_TYPE)) {
        error_setg(errp, "Object type '%s' is not supported (Spindle has: "
                   OBJECT_TYPE_NAMES ")", type ? type : "");
        return false;
    }
    return throttle_group_create(opts, object_id_taken, errp) != NULL;
}

char *object_option_help(const char *arg)
{
    GString *out;

    if (!strcmp(arg, "help")) {
        out = g_string_new("Available object types:\n");
        for (size_t i = 0; i < G_N_ELEMENTS(object_types); i++) {
            g_string_append_printf(out, "  %s\n", object_types[i].name);
        }
        return g_string_free(out, FALSE);
    }
    for (size_t i = 0; i < G_N_ELEMENTS(object_types); i++) {
        const char *name = object_types[i].name;
        g_autofree char *plain = g_strdup_printf("%s,help", name);
        g_autofree char *keyed = g_strdup_printf("qom-type=%s,help", name);

        if (!strcmp(arg, plain) || !strcmp(arg, keyed)) {
            return object_types[i].help();
        }
    }
    return NULL;
}
