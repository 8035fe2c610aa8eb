/*
 * Opts: structured options, as --blockdev and --export take them.
 *
 * Two spellings produce the same tree:
 *     driver=file,node-name=d0,filename=vm.img,cache.direct=on
 *     {"driver": "file", "node-name": "d0", "filename": "vm.img",
 *      "cache": {"direct": true}}
 * Dotted keys become nested objects.  In the key=value form every value is
 * a string; the typed getters below accept a string or the JSON type alike
 * ("on"/true, "4096"/4096), so drivers need not care which form was used.
 *
 * Every getter marks its key as used; opts_check_unused() then reports the
 * first key nobody asked for ("Invalid parameter 'cache.dirct'"), so a
 * typo is an error instead of being ignored.
 *
 * Not thread-safe: one thread (the main loop) uses an Opts at a time.
 */
#ifndef SPINDLE_UTIL_OPTS_H
#define SPINDLE_UTIL_OPTS_H

#include <stdbool.h>
#include <stdint.h>
#include <json-glib/json-glib.h>
#include "util/error.h"

typedef struct Opts Opts;

/*
 * Parse "key=value,..." (',,' escapes a comma, dotted keys nest).  A first
 * element without '=' is the value of implied_key (may be NULL).  Errors:
 * empty keys, duplicate keys, a key used both as a value and as an object.
 */
Opts *opts_parse_keyval(const char *str, const char *implied_key, Error **errp);

/* Parse a JSON object (the text starts with '{'). */
Opts *opts_parse_json(const char *json, Error **errp);

/* Parse either form: JSON if the first non-blank character is '{'. */
Opts *opts_parse(const char *str, const char *implied_key, Error **errp);

/* Wrap an existing JSON object (a reference is taken). */
Opts *opts_new_from_object(JsonObject *obj);

void opts_free(Opts *opts);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(Opts, opts_free)

/* True if key (dotted) is present. Does not mark it used. */
bool opts_has(Opts *opts, const char *key);

/* True (and key marked used) if key is present and JSON null, as in
 * "backing": null.  Does nothing otherwise. */
bool opts_take_null(Opts *opts, const char *key);

/*
 * Typed getters.  A missing key leaves *out = def and succeeds; a present
 * key of the wrong type or out of range fails with an error naming the key.
 * The string from opts_get_str() is borrowed: valid until opts is freed.
 */
bool opts_get_str(Opts *opts, const char *key, const char *def,
                  const char **out, Error **errp);
bool opts_get_bool(Opts *opts, const char *key, bool def, bool *out,
                   Error **errp);
bool opts_get_int(Opts *opts, const char *key, int64_t min, int64_t max,
                  int64_t def, int64_t *out, Error **errp);
/* A byte count: an integer, or a string with an optional k/M/G/T suffix
 * (powers of 1024); at most INT64_MAX. */
bool opts_get_size(Opts *opts, const char *key, uint64_t def, uint64_t *out,
                   Error **errp);
/*
 * One of the strings in choices (NULL-terminated); *out is its index.
 * Errors list the choices.
 */
bool opts_get_enum(Opts *opts, const char *key, const char *const *choices,
                   int def, int *out, Error **errp);

/*
 * The nested object at key as its own Opts (for a child node given inline),
 * or NULL if key is absent or not an object.  The key and everything below
 * it count as used in the parent.  The child's messages name its keys by
 * their full path ("file.filename").  Free with opts_free().
 */
Opts *opts_get_child(Opts *opts, const char *key);

/*
 * A list of objects at key: a JSON array of objects, or (key=value form)
 * an object whose keys are "0", "1", ... without gaps, as in
 * inject-error.0.errno=5,inject-error.1.errno=28.  Returns a new array of
 * Opts (free with g_ptr_array_unref), empty if key is absent, or NULL with
 * errp set if it is malformed.  The key counts as used in the parent.
 */
GPtrArray *opts_get_list(Opts *opts, const char *key, Error **errp);

/*
 * Like opts_get_list(), but an element may also be a plain string, which
 * stands for an object with the one member implied_key: lun.0=disk0 (or
 * JSON "lun": ["disk0"]) is read as lun.0.node-name=disk0 with implied_key
 * "node-name".  Such an element's messages name its keys as "lun.0.node-
 * name".
 */
GPtrArray *opts_get_list_implied(Opts *opts, const char *key,
                                 const char *implied_key, Error **errp);

/* Fail, naming the first key no getter asked for.  "what" prefixes it. */
bool opts_check_unused(Opts *opts, const char *what, Error **errp);

#endif
