/*
 * spindle --config FILE: the command line's object, blockdev, chardev,
 * monitor and export options, read from a JSON file (docs/cli.md).
 *
 * Main thread (it runs before anything else exists).
 */
#ifndef SPINDLE_DAEMON_CONFIG_H
#define SPINDLE_DAEMON_CONFIG_H

#include <stdbool.h>
#include <glib.h>
#include "util/error.h"

/* One entry of the file: the argument of one command line option. */
typedef struct DaemonConfigEntry {
    const char *key;             /* "object", "blockdev", ... (static) */
    char *label;                 /* "FILE: export[2]", for messages */
    char *arg;                   /* the option's argument: the entry's
                                  * JSON text, or its string as given */
} DaemonConfigEntry;

/* Free an entry (a GDestroyNotify; NULL does nothing). */
void daemon_config_entry_free(gpointer entry);

/*
 * Parse text, the contents of the file named path (for messages), and
 * append its entries to out (a GPtrArray freeing them with
 * daemon_config_entry_free), in the order object, blockdev, chardev,
 * monitor, export, each key's entries in the file's order.  An entry is a
 * JSON object (the option's JSON form) or a string (its key=value form);
 * what each one says is checked only when the option is processed.
 *
 * Returns false with errp set ("FILE: ..." naming the key or the entry,
 * e.g. "FILE: export[2]: ...") and out unchanged if the text is not a
 * JSON object, has a key other than those five, a key whose value is not
 * an array, or an entry that is neither an object nor a string.
 */
bool daemon_config_parse(const char *path, const char *text, GPtrArray *out,
                         Error **errp);

/* daemon_config_parse() on the file at path; errors also name the file
 * when it cannot be read. */
bool daemon_config_load(const char *path, GPtrArray *out, Error **errp);

#endif
