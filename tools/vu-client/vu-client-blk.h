/*
 * spindle-vu-client: the virtio-blk commands (vu-client-blk.c).  Main
 * thread.  The cmd_* functions are CmdRun handlers (vu-client-cmd.h).
 */
#ifndef SPINDLE_TOOLS_VU_CLIENT_BLK_H
#define SPINDLE_TOOLS_VU_CLIENT_BLK_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <glib.h>

#include "vu-client-cmd.h"

CmdHandler cmd_get_id, cmd_write, cmd_read, cmd_flush;
/* discard and write-zeroes */
CmdHandler cmd_dwz;

/* GET_ID on queue qi into r (serial, serial_hex, serial_status); false
 * with errp set only on a transport error. */
bool blk_get_serial(Client *c, unsigned qi, Result *r, Error **errp);
/*
 * Read [offset, offset+len) on queue qi; check it against pattern seed
 * seed (check_seed) or zeroes (check_zeroes), feed sum and/or out (either
 * may be NULL).  False with errp set (and r's status and mismatch) on an
 * error or a mismatch.
 */
bool blk_read_range(Client *c, unsigned qi, uint64_t offset, uint64_t len,
                    bool check_seed, uint64_t seed, bool check_zeroes,
                    GChecksum *sum, FILE *out, Result *r, Error **errp);

#endif
