/*
 * key=value option strings, as on QEMU's command line:
 *     "iothread,id=iot0,poll-max-ns=32768"
 * Pairs are separated by ',', a literal ',' inside a value is written ",,".
 * A first element without '=' is the value of the "implied key" (for
 * --object that is "qom-type").  Any thread.
 */
#ifndef SPINDLE_UTIL_KEYVAL_H
#define SPINDLE_UTIL_KEYVAL_H

#include <glib.h>
#include "util/error.h"

typedef struct KeyvalPair {
    char *key;
    char *value;
} KeyvalPair;

/*
 * Parse str into a GPtrArray of KeyvalPair (in order; the array owns them).
 * implied_key may be NULL, in which case every element needs '='.  Empty
 * keys and duplicate keys are errors; an empty or NULL str gives an empty
 * array.  Returns NULL and sets errp on error.
 */
GPtrArray *keyval_parse(const char *str, const char *implied_key, Error **errp);

/*
 * The element of a key=value string at *pos, up to the next single comma,
 * in a new string (the caller frees it) with ",," undoubled; *pos moves
 * past that comma, or to the end of the string.
 */
char *keyval_next_element(const char **pos);

/* The value of key, or NULL.  Borrowed from opts. */
const char *keyval_lookup(GPtrArray *opts, const char *key);

/*
 * For a list built by hand: the free function of its elements (make it
 * with g_ptr_array_new_with_free_func(keyval_pair_free)), and appending
 * key (copied) = value (taken: a g_malloc'd string the list frees).
 */
void keyval_pair_free(gpointer p);
void keyval_append(GPtrArray *opts, const char *key, char *value);

#endif
