/*
 * IOThread: a named thread that runs an AioContext until it is stopped.
 *
 * Properties (string values as on the command line; see docs/iothreads.md):
 *   poll-max-ns    longest busy-poll window in ns (default 32768; 0: off)
 *   poll-grow      window growth factor (default 0: double)
 *   poll-shrink    window shrink divisor (default 0: the policy's default,
 *                  reset to 0 for qemu-classic, 2 for qemu-weighted)
 *   poll-weight    qemu-weighted's averaging shift, 0-63 (default 0: 3)
 *   aio-max-batch  requests submitted to the kernel at once (default 0:
 *                  the engine's default)
 *   cpu-affinity   CPUs the thread may run on, as a kernel CPU list:
 *                  "2", "0-3", "0-3:8" (':' or ',' separate ranges; ',' is
 *                  written ",," inside a key=value option string); ""
 *                  means all CPUs.  Default: inherited.
 *   poll-policy    "predictive" (the default), "fixed", "qemu-classic"
 *                  ("adaptive" is its old name) or "qemu-weighted"
 *                  (docs/iothreads.md)
 *   thread-id      the kernel's thread id (read-only)
 * The table iothread_properties[] below is their one description in code.
 *
 * Lifecycle and properties are main-thread functions.  Properties may be
 * changed while the thread runs; the change is seen at the thread's next
 * loop turn, and no field is written by two threads.
 */
#ifndef SPINDLE_UTIL_IOTHREAD_H
#define SPINDLE_UTIL_IOTHREAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include "util/aio.h"
#include "util/error.h"

typedef struct IOThread IOThread;

/* How a property's value is typed: QMP gives it as a JSON integer or a
 * JSON string; on the command line both are text. */
typedef enum IOThreadPropertyType {
    IOTHREAD_PROP_INT,          /* an integer from 0 to max */
    IOTHREAD_PROP_STR,
} IOThreadPropertyType;

typedef struct IOThreadProperty IOThreadProperty;

/*
 * One IOThread property, as util/iothread.c describes it once for the
 * command line, object-add, qom-set/qom-get and query-iothreads.  The
 * hooks are iothread.c's own; callers go through iothread_set_property()
 * and friends, which check the name and roll back on error.
 */
struct IOThreadProperty {
    const char *name;
    IOThreadPropertyType type;
    const char *arg;            /* the value in the help: "<int>" */
    const char *doc;            /* help text; '\n' continues it below */
    /* Validate value and store it in iot's configuration, which is left
     * as it was on error.  NULL: read-only (thread-id). */
    bool (*set)(IOThread *iot, const IOThreadProperty *prop,
                const char *value, Error **errp);
    /* The value: get_int for IOTHREAD_PROP_INT, get_str (a new string)
     * for IOTHREAD_PROP_STR. */
    int64_t (*get_int)(const IOThread *iot, const IOThreadProperty *prop);
    char *(*get_str)(const IOThread *iot, const IOThreadProperty *prop);
    /* Push the stored value into the running thread. */
    bool (*apply)(IOThread *iot, Error **errp);
    size_t offset;              /* an integer's place in the configuration */
    int64_t max;                /* ... and its largest value */
};

/* Every property, in the order query-iothreads lists them; the entry
 * after the last has name NULL.  Any thread (it is constant). */
extern const IOThreadProperty iothread_properties[];

/* The property called name, or NULL.  Any thread. */
const IOThreadProperty *iothread_property_find(const char *name);

/*
 * Create and start an IOThread named id (the thread's name is "iot-"+id,
 * truncated to the kernel's 15 characters).  Ids are unique: a second
 * IOThread with the same id is an error.  props is a key=value list of
 * the properties above (may be NULL or empty; borrowed: the caller keeps
 * ownership); the first bad one is reported naming the property and
 * nothing is started.
 */
IOThread *iothread_create(const char *id, GPtrArray *props, Error **errp);

/*
 * Create from the argument of --object: key=value text such as
 * "iothread,id=iot0,poll-max-ns=32768", or the same as a JSON object,
 * {"qom-type": "iothread", "id": "iot0", "poll-max-ns": 32768} (members
 * are strings, integers or booleans).  The type (the implied first
 * element, or qom-type) is required and must be "iothread"; "id" is
 * required.  Errors name the parameter.  Main thread.
 */
IOThread *iothread_create_from_option(const char *arg, Error **errp);

/* The same, but the type may be left out: "id=iot0,poll-max-ns=0". */
IOThread *iothread_create_from_string(const char *optstr, Error **errp);

/*
 * Whether --object's argument asks for help ("help", "iothread,help"):
 * then the text to print (the object types, or the iothread properties
 * with their help; caller frees), else NULL.  Any thread.
 */
char *iothread_option_help(const char *arg);

/* An object type must be "iothread": false with errp set otherwise
 * ("Object type 'x' is not supported ..."). */
bool iothread_check_type(const char *type, Error **errp);

/*
 * Stop the thread, join it and free everything.  The BHs pending at the stop
 * run once; what they schedule in turn is dropped (oneshot BHs are freed
 * without running).  Owners of plain BHs delete them after this returns.
 */
void iothread_destroy(IOThread *iot);

/* The IOThread created with id, or NULL.  Main thread. */
IOThread *iothread_lookup(const char *id);

/*
 * The IOThread whose AioContext is ctx (borrowed), or NULL if ctx belongs
 * to no IOThread (the main loop's, or a context of its own).  Main thread.
 */
IOThread *iothread_find_by_context(AioContext *ctx);

/* Every IOThread, in creation order (a new array; free it with
 * g_ptr_array_unref; the IOThreads are borrowed).  Main thread. */
GPtrArray *iothread_list(void);

const char *iothread_get_id(const IOThread *iot);
AioContext *iothread_get_aio_context(IOThread *iot);

/* The kernel thread id (for /proc/PID/task/TID and query-iothreads). */
pid_t iothread_get_thread_id(const IOThread *iot);

/* Set property name from a string.  Main thread.  Errors name the property. */
bool iothread_set_property(IOThread *iot, const char *name, const char *value,
                           Error **errp);

/* Set an integer property (poll-*, aio-max-batch) from a number. */
bool iothread_set_property_int(IOThread *iot, const char *name, int64_t value,
                               Error **errp);

/* The property's value as a string (caller frees), or NULL with errp set. */
char *iothread_get_property(IOThread *iot, const char *name, Error **errp);

/* An integer property's value (thread-id too); false with errp set if
 * there is no such property or it is not an integer.  Main thread. */
bool iothread_get_property_int(IOThread *iot, const char *name, int64_t *out,
                               Error **errp);

/* Thread CPU time (user + system) in ns, read from any thread. */
int64_t iothread_get_cpu_ns(const IOThread *iot);

#endif
