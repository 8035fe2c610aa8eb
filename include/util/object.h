/*
 * Objects: what --object and object-add create, by type.
 *
 * Two types: "iothread" (util/iothread.h) and "throttle-group"
 * (util/throttle-group.h).  Ids are unique across types: an iothread and
 * a throttle group cannot share one.  The table in util/object.c says,
 * for each type, how to create one from the option text, find one by id,
 * and print its help.
 *
 * Main thread (but object_option_help(): any thread).
 */
#ifndef SPINDLE_UTIL_OBJECT_H
#define SPINDLE_UTIL_OBJECT_H

#include <stdbool.h>
#include "util/error.h"
#include "util/opts.h"

/* The types, for messages: "iothread, throttle-group". */
#define OBJECT_TYPE_NAMES "iothread, throttle-group"

/*
 * Create from the argument of --object: key=value text with the type
 * first ("throttle-group,id=tg0,x-iops-total=100") or a JSON object with
 * qom-type.  Errors name the parameter (or say which types exist).
 */
bool object_create_from_option(const char *arg, Error **errp);

/*
 * Create from object-add's arguments (qom-type, id, the properties as
 * JSON members).  The iothread type is the caller's (monitor: its QMP
 * typing); this creates the other types, and fails for an id in use.
 */
bool object_add_json(JsonObject *args, Error **errp);

/* Whether an object of any type has id. */
bool object_id_taken(const char *id);

/*
 * Whether --object's argument asks for help ("help", "TYPE,help"): then
 * the text to print (caller frees), else NULL.
 */
char *object_option_help(const char *arg);

#endif
