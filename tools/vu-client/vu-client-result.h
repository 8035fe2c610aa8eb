/*
 * spindle-vu-client: a command's result, a JSON object, and the output of
 * all results at the end (one JSON document with --json, else indented
 * "key: value" text).  Main thread.
 */
#ifndef SPINDLE_TOOLS_VU_CLIENT_RESULT_H
#define SPINDLE_TOOLS_VU_CLIENT_RESULT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <glib.h>
#include <json-glib/json-glib.h>

#include "vu-frontend.h"

/* A command's result: the JSON object, printed as text or JSON later. */
typedef struct Result {
    JsonObject *obj;
} Result;

/* Set member key of the result to v (replacing one of that name). */
void res_int(Result *r, const char *key, int64_t v);
void res_str(Result *r, const char *key, const char *v);
void res_bool(Result *r, const char *key, bool v);
/* v as a string "0x%016x". */
void res_hex(Result *r, const char *key, uint64_t v);
/* The "mismatch" member: disk offset, expected and found words. */
void res_mismatch(Result *r, uint64_t off, uint64_t want, uint64_t got);
/* What a read checked: "sha256" of the data, "seed" (with have_seed) and
 * "verified" (pattern, zeroes or no). */
void res_verified(Result *r, GChecksum *sum, bool have_seed, uint64_t seed,
                  bool zeroes);
/* A new array as member key of r; returned for elements (r owns it). */
JsonArray *res_array(Result *r, const char *key);
/* A new object {"queue": queue} appended to a; returned for more members
 * (a owns it). */
JsonObject *res_queue_entry(JsonArray *a, unsigned queue);

/* A queue's notification counters into o: kicks, kicks_avoided,
 * interrupts, wakeups. */
void res_queue_stats(JsonObject *o, const VufQueueStats *s);

/* Member "alive": whether fe's back-end still answers (GET_FEATURES
 * within 2 s), unless it closed the connection already. */
void res_alive(Result *r, VuFrontend *fe, bool closed);

/* Members "queue_broken" (the library found q's used ring impossible),
 * "error_signalled" (the device signalled q's error eventfd: it broke the
 * queue) and "alive" (res_alive()). */
void res_queue_alive(Result *r, VuFrontend *fe, VufQueue *q, bool closed);

/*
 * A member of a structure, for res_fields_object(): its name in the
 * result, where it is and how big (1, 2, 4 or 8 bytes, host order, an
 * unsigned or a bool), and the factor it is reported with (0: a bool).
 */
typedef struct ResField {
    const char *name;
    size_t offset;
    size_t size;
    uint64_t scale;
} ResField;

#define RES_FIELD(type, field, name, scale) \
    { name, offsetof(type, field), sizeof(((type *)0)->field), scale }
#define RES_BOOL(type, field, name)     RES_FIELD(type, field, name, 0)

/* The n fields of the structure at s as a new JSON object. */
JsonObject *res_fields_object(const void *s, const ResField *fields,
                              size_t n);
/* ... as member key of r. */
void res_fields(Result *r, const char *key, const void *s,
                const ResField *fields, size_t n);

/* n bytes as lower-case hex digits.  Caller frees. */
char *hex_string(const uint8_t *p, size_t n);

/*
 * Print the results (JsonObjects, each with its "command") and the error
 * that stopped the run (NULL if none) on stdout: one JSON document
 * {ok, error, results} with json, else text; the error also goes to
 * stderr in text mode.
 */
void print_results(bool json, JsonArray *results, const char *error);

#endif
