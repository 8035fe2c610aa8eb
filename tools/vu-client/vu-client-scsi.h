/*
 * spindle-vu-client: the scsi-* commands and what the other virtio-scsi
 * code of the client shares (vu-client-scsi.c).  Main thread.
 */
#ifndef SPINDLE_TOOLS_VU_CLIENT_SCSI_H
#define SPINDLE_TOOLS_VU_CLIENT_SCSI_H

#include <stdbool.h>
#include <stdint.h>

#include "vu-client-cmd.h"

/* The commands: CmdRun handlers (vu-client-cmd.h). */
CmdHandler cmd_scsi_inquiry, cmd_scsi_read_capacity, cmd_scsi_report_luns;
CmdHandler cmd_scsi_tur, cmd_scsi_read, cmd_scsi_write, cmd_scsi_unmap;
CmdHandler cmd_scsi_sync, cmd_scsi_tmf, cmd_scsi_an_query, cmd_scsi_events;

/* After connecting to a SCSI device: allocate the commands, the control
 * request and the event buffers, and post these. */
bool client_scsi_start(Client *c, Error **errp);
/* Post the event buffers again (after a reconnect). */
bool client_scsi_repost_events(Client *c, Error **errp);
void client_scsi_free(Client *c);

/* Parse a sense key name (DATA_PROTECT, data-protect) or number; -1 if
 * unknown.  Any thread. */
int scsi_sense_key_by_name(const char *name);
/* READ or WRITE (10) or (16) into cdb; returns the CDB length.  Any
 * thread. */
unsigned scsi_cdb_rw(uint8_t *cdb, bool write, uint64_t lba,
                     uint32_t nblocks, unsigned cdb_bits, bool fua);
/* LUN lun's block size and capacity in blocks (READ CAPACITY (16) on
 * request queue qi, cached); false with errp set if it fails. */
bool scsi_lun_geometry(Client *c, unsigned qi, unsigned lun, uint32_t *bs,
                       uint64_t *nblocks, Error **errp);
/* The tag for the next command. */
uint64_t scsi_next_tag(Client *c);
/*
 * Prepare req (its buffer holds cmd->len bytes) as one WRITE of cmd's
 * range and LUN with pattern cmd->seed and a new tag (in r), after
 * checking the range against the LUN (whose geometry a READ CAPACITY on
 * cmd's request queue may have to find first).  False with errp set.
 */
bool scsi_prep_write(Client *c, const Command *cmd, VufScsiReq *req,
                     Result *r, Error **errp);

#endif
