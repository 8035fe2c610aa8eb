/*
 * spindle-vu-client internals shared by its source files: the parsed
 * command line, the session state and the result objects commands fill.
 *
 * vu-client.c          main, session, output, the simple commands
 * vu-client-args.c     command-line parsing
 * vu-client-run.c      verify-run (one thread per queue) and malformed
 * vu-client-bad.c      bad-request (malformed virtio-blk requests)
 * vu-client-scsi.c     the scsi-* commands (a virtio-scsi device)
 * vu-client-scsi-run.c scsi-verify-run and scsi-bad-request
 * vu-client-verify.c   the engine of verify-run and scsi-verify-run
 *
 * Everything runs in the main thread except verify-run's and
 * scsi-verify-run's queue threads, which only touch their own queue,
 * requests and result slot.
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
    CMD_GET_CONFIG,
    CMD_WAIT_CONFIG_CHANGE,
    CMD_WAIT_FILE,
    /* virtio-scsi (vu-client-scsi.c) */
    CMD_SCSI_INQUIRY,
    CMD_SCSI_READ_CAPACITY,
    CMD_SCSI_REPORT_LUNS,
    CMD_SCSI_TUR,
    CMD_SCSI_READ,
    CMD_SCSI_WRITE,
    CMD_SCSI_UNMAP,
    CMD_SCSI_SYNC,
    CMD_SCSI_TMF,
    CMD_SCSI_AN_QUERY,
    CMD_SCSI_EVENTS,
    CMD_SCSI_VERIFY_RUN,
    CMD_SCSI_BAD_REQUEST,
} CmdKind;

/* Which device the commands are for. */
typedef enum CmdDevice {
    CMD_DEV_ANY,                /* info, reconnect, stop, stats, malformed,
                                 * get-config, wait-config-change,
                                 * wait-file */
    CMD_DEV_BLK,
    CMD_DEV_SCSI,
} CmdDevice;

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
    /* malformed, bad-request, scsi-tmf, scsi-bad-request; wait-file's
     * PATH */
    char *what;
    /* scsi-* */
    unsigned lun;
    int evpd_page;              /* scsi-inquiry --evpd; -1: standard data */
    unsigned cdb_bits;          /* 10 or 16: READ/WRITE/READ CAPACITY */
    bool fua;                   /* scsi-write --fua */
    bool have_tag;              /* scsi-tmf --tag */
    uint64_t tag;
    uint64_t lba, nblocks;      /* scsi-unmap */
    int expect_sense;           /* --expect-sense KEY; -1: GOOD expected */
    uint64_t events;            /* scsi-an-query --events */
    double wait_s;              /* scsi-events --wait; wait-config-change
                                 * and wait-file --timeout (< 0: the
                                 * global --timeout) */
} Command;

typedef struct ClientOpts {
    char *socket;
    VufDeviceType device;       /* --device, or what the commands need */
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
    /* virtio-scsi (vu-client-scsi.c) */
    VufScsiReq **sreqs;         /* one synchronous command per request
                                 * queue */
    VufScsiCtrl *ctrl;
    VufScsiEventBuf **events;   /* posted on the event queue */
    unsigned nevents;
    GArray *event_log;          /* VirtioScsiEvent received so far */
    uint64_t next_tag;          /* tag of the next command (from 1) */
    uint64_t last_tag;          /* tag of the last command sent */
    GHashTable *block_sizes;    /* LUN -> READ CAPACITY's block size */
} Client;

/* A command's result: the JSON object, printed as text or JSON later. */
typedef struct Result {
    JsonObject *obj;
} Result;

/* The number of request queues (SCSI) or queues (blk) to use. */
static inline unsigned client_io_queues(const Client *c)
{
    unsigned n = vuf_num_queues(c->fe);

    return c->opts->device == VUF_DEVICE_SCSI ? n - VIRTIO_SCSI_VQ_REQUEST0
                                              : n;
}

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
/* Verify bytes that should be zeroes; on a mismatch *bad_off / *got. */
bool zeroes_check(const uint8_t *buf, uint64_t disk_off, size_t len,
                  uint64_t *bad_off, uint64_t *got);
/* The JSON "mismatch" member: offset, expected and found words. */
void res_mismatch(Result *r, uint64_t off, uint64_t want, uint64_t got);
/* Set member key of the result to v (replacing one of that name). */
void res_int(Result *r, const char *key, int64_t v);
void res_str(Result *r, const char *key, const char *v);
void res_bool(Result *r, const char *key, bool v);

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

/* ---- vu-client-scsi.c ---- */

/* Which device a command is for. */
CmdDevice command_device(CmdKind kind);
/* After connecting to a SCSI device: allocate the commands, the control
 * request and the event buffers, and post these. */
bool client_scsi_start(Client *c, Error **errp);
/* Post the event buffers again (after a reconnect). */
bool client_scsi_repost_events(Client *c, Error **errp);
void client_scsi_free(Client *c);
bool cmd_scsi(Client *c, const Command *cmd, Result *r, Error **errp);
/* Parse a sense key name (DATA_PROTECT, data-protect) or number; -1 if
 * unknown. */
int scsi_sense_key_by_name(const char *name);
/* READ or WRITE (10) or (16) into cdb; returns the CDB length. */
unsigned scsi_cdb_rw(uint8_t *cdb, bool write, uint64_t lba,
                     uint32_t nblocks, unsigned cdb_bits, bool fua);
/* LUN lun's block size and capacity in blocks (READ CAPACITY (16) on
 * request queue qi, cached); false with errp set if it fails. */
bool scsi_lun_geometry(Client *c, unsigned qi, unsigned lun, uint32_t *bs,
                       uint64_t *nblocks, Error **errp);
/* The tag for the next command. */
uint64_t scsi_next_tag(Client *c);

/* ---- vu-client-scsi-run.c ---- */
bool cmd_scsi_verify_run(Client *c, const Command *cmd, Result *r,
                         Error **errp);
bool cmd_scsi_bad_request(Client *c, const Command *cmd, Result *r,
                          Error **errp);
bool scsi_bad_request_kind_valid(const char *name);
/* The names `scsi-bad-request` accepts ("a, b, c"). Caller frees. */
char *scsi_bad_request_kinds(void);

#endif
