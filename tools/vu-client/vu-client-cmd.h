/*
 * spindle-vu-client: a parsed command line.  The global options
 * (ClientOpts) and the commands to run, in order (Command); the parser is
 * vu-client-args.c, the commands' implementations are the other
 * vu-client-*.c files, each declared by the header of the same name.
 */
#ifndef SPINDLE_TOOLS_VU_CLIENT_CMD_H
#define SPINDLE_TOOLS_VU_CLIENT_CMD_H

#include <stdbool.h>
#include <stdint.h>

#include <glib.h>

#include "vu-frontend.h"

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
    CMD_TOUCH,
    CMD_RESUME,
    CMD_LOG_START,
    CMD_LOG_STOP,
    CMD_LOG_DIRTY,
    /* virtio-scsi (vu-client-scsi.c, vu-client-scsi-run.c) */
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

/* Which device a command is for. */
typedef enum CmdDevice {
    CMD_DEV_ANY,                /* info, reconnect, stop, stats, malformed,
                                 * get-config, wait-config-change,
                                 * wait-file, touch, resume, log-* */
    CMD_DEV_BLK,
    CMD_DEV_SCSI,
} CmdDevice;

typedef struct Client Client;
typedef struct Command Command;
typedef struct Result Result;

/*
 * A command's handler: run cmd in the session c and fill r; false with
 * errp set if it failed.  Main thread.  The command files declare their
 * handlers with this type (CmdHandler cmd_info, cmd_stop;), so that every
 * one has the same signature.
 */
typedef bool CmdHandler(Client *c, const Command *cmd, Result *r,
                        Error **errp);
typedef CmdHandler *CmdRun;

struct Command {
    CmdKind kind;
    const char *name;
    CmdDevice device;
    CmdRun run;
    uint64_t offset;            /* bytes */
    uint64_t len;               /* bytes */
    unsigned queue;
    bool have_seed;             /* write --pattern, read --verify */
    uint64_t seed;
    bool expect_zeroes;         /* read */
    bool unmap;                 /* write-zeroes */
    char *output;               /* read --output FILE */
    /* verify-run */
    uint64_t size, count, bs, iodepth;   /* size: also log-start's */
    unsigned run_queues;
    /* malformed, bad-request, scsi-tmf, scsi-bad-request; wait-file's
     * and touch's PATH */
    char *what;
    /* scsi-* */
    unsigned lun;
    int evpd_page;              /* scsi-inquiry --evpd; -1: standard data */
    unsigned cdb_bits;          /* 10 or 16: READ/WRITE/READ CAPACITY */
    bool fua;                   /* scsi-write --fua */
    bool no_wait;               /* write, scsi-write --no-wait */
    bool have_tag;              /* scsi-tmf --tag */
    uint64_t tag;
    uint64_t lba, nblocks;      /* scsi-unmap */
    int expect_sense;           /* --expect-sense KEY; -1: GOOD expected */
    uint64_t events;            /* scsi-an-query --events */
    double wait_s;              /* scsi-events --wait; wait-config-change,
                                 * wait-file and resume --timeout (< 0:
                                 * the global --timeout) */
};

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

/*
 * Named kinds (malformed, bad-request, scsi-bad-request KIND): tables of n
 * entries of size bytes, each starting with its const char *name.
 * kind_find() returns the entry named name, or NULL.  kind_names()
 * appends the names to s as "a, b, c", with a line break after every wrap
 * of them (0: none); *count is how many are already in s, and grows.
 */
const void *kind_find(const void *table, size_t n, size_t size,
                      const char *name);
void kind_names(GString *s, const void *table, size_t n, size_t size,
                unsigned wrap, unsigned *count);

/* A new command with the defaults every option starts from. */
Command *command_new(CmdKind kind, const char *name, CmdDevice device,
                     CmdRun run);
/* Free a Command (a GDestroyNotify for ClientOpts.commands). */
void command_free(gpointer p);

#endif
