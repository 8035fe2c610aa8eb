/*
 * spindle-vu-client internals shared by its source files: the parsed
 * command line, the session state and the result objects commands fill.
 *
 * vu-client.c          main, session, output, the simple commands
 * vu-client-args.c     command-line parsing
 * vu-client-run.c      verify-run (one thread per queue) and malformed
 * vu-client-bad.c      bad-request (malformed virtio-blk requests)
 *
 * Everything runs in the main thread except verify-run's queue threads,
 * which only touch their own queue, requests and result slot.
 */
#ifndef SPINDLE_TOOLS_VU_CLIENT_H
#define SPINDLE_TOOLS_VU_CLIENT_H

#include <stdbool.h>
#include <stdint.h>

#include <glib.h>
#include <json-glib/json-glib.h>

#include "vu-frontend.h"

#define CLIENT_EXIT_FAILURE 1
#define CLIENT_EXIT_USAGE   2

#define CHUNK_MAX           (1u << 20)  /* data bytes per synchronous request */
#define RUN_BS_MAX          (16u << 20) /* largest verify-run --bs */

typedef enum CmdKind {
    CMD_INFO,
    CMD_GET_ID,
    CMD_WRITE,
    CMD_READ,
    CMD_FLUSH,
    CMD_DISCARD,
    CMD_WRITE_ZEROES,
    CMD_VERIFY_RUN,
    CMD_RECONNECT,
    CMD_STOP,
    CMD_MALFORMED,
    CMD_STATS,
    CMD_BAD_REQUEST,
} CmdKind;

typedef struct Command {
    CmdKind kind;
    const char *name;
    uint64_t offset;            /* bytes */
    uint64_t len;               /* bytes */
    unsigned queue;
    bool have_seed;             /* write --pattern, read --verify */
    uint64_t seed;
    bool expect_zeroes;         /* read */
    bool unmap;                 /* write-zeroes */
    char *output;               /* read --output FILE */
    /* verify-run */
    uint64_t size, count, bs, iodepth;
    unsigned run_queues;
    /* malformed, bad-request */
    char *what;
} Command;

typedef struct ClientOpts {
    char *socket;
    unsigned queues;
    bool json;
    uint64_t mem_size;
    unsigned queue_size;
    VufCompletion completion;
    bool indirect;
    unsigned segments;
    double timeout_s;
    double connect_timeout_s;
    bool mem_slots;
    uint64_t features_disabled;
    uint64_t features_required;
    uint64_t protocol_features_disabled;
    GPtrArray *commands;        /* Command * */
} ClientOpts;

/* What is known about the disk's contents, for `reconnect` to verify. */
typedef enum ExtentKind {
    EXTENT_PATTERN,
    EXTENT_ZEROES,
} ExtentKind;

typedef struct Extent {
    uint64_t start, end;        /* bytes, end exclusive */
    ExtentKind kind;
    uint64_t seed;
} Extent;

typedef struct Client {
    ClientOpts *opts;
    VuFrontend *fe;
    VufBlkReq **reqs;           /* one synchronous request per queue */
    size_t chunk;               /* data bytes of each of those */
    GArray *extents;            /* Extent, non-overlapping */
    unsigned add_flags;         /* VUFQ_ADD_INDIRECT or 0 */
    int64_t timeout_ns;
} Client;

/* A command's result: the JSON object, printed as text or JSON later. */
typedef struct Result {
    JsonObject *obj;
} Result;

/* ---- vu-client-args.c ---- */

/* Parse the whole command line into *o (o->commands must exist).  False
 * with errp set on any mistake (exit status 2). */
bool parse_command_line(int argc, char **argv, ClientOpts *o, Error **errp);
/* Free a Command (a GDestroyNotify for o->commands). */
void command_free(gpointer p);
/* ---- vu-client.c ---- */

/* The pattern word for 8-byte word word_index of the disk, seed seed. */
uint64_t pattern_word(uint64_t seed, uint64_t word_index);
/* Fill buf (len bytes, len % 8 == 0) with the pattern of disk bytes
 * [disk_off, disk_off + len). */
void pattern_fill(uint8_t *buf, uint64_t disk_off, size_t len, uint64_t seed);
/* Compare; on a mismatch return false with *bad_off the disk offset of the
 * first differing byte, *want and *got the 8-byte words around it. */
bool pattern_check(const uint8_t *buf, uint64_t disk_off, size_t len,
                   uint64_t seed, uint64_t *bad_off, uint64_t *want,
                   uint64_t *got);

/* Forget what is known about [start, start+len). */
void extents_forget(Client *c, uint64_t start, uint64_t len);

/* Message for a data-path errno from the vufq/vufblk functions. */
const char *client_strerror(int err);

/* ---- vu-client-run.c ---- */
bool cmd_verify_run(Client *c, const Command *cmd, Result *r, Error **errp);
bool cmd_malformed(Client *c, const Command *cmd, Result *r, Error **errp);
bool malformed_kind_valid(const char *name);
/* The names `malformed` accepts, for --help ("a, b, c"). Caller frees. */
char *malformed_kinds(void);

/* ---- vu-client-bad.c ---- */
bool cmd_bad_request(Client *c, const Command *cmd, Result *r, Error **errp);
bool bad_request_kind_valid(const char *name);
/* The names `bad-request` accepts ("a, b, c"). Caller frees. */
char *bad_request_kinds(void);

#endif
