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
 *
 * Lifecycle and properties are main-thread functions.  Properties may be
 * changed while the thread runs; the change is seen at the thread's next
 * loop turn, and no field is written by two threads.
 */
#ifndef SPINDLE_UTIL_IOTHREAD_H
#define SPINDLE_UTIL_IOTHREAD_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include "util/aio.h"
#include "util/error.h"

typedef struct IOThread IOThread;

/* The property names, by the type QMP gives their values (NULL-ended). */
extern const char *const iothread_int_property_names[];
extern const char *const iothread_str_property_names[];

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
 * Create from an option string such as
 * "iothread,id=iot0,poll-max-ns=32768" (the form of --object).  The
 * implied first element, if present, must be "iothread"; "id" is required.
 */
IOThread *iothread_create_from_string(const char *optstr, Error **errp);

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

/* Thread CPU time (user + system) in ns, read from any thread. */
int64_t iothread_get_cpu_ns(const IOThread *iot);

#endif
