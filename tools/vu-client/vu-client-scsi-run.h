/*
 * spindle-vu-client: scsi-verify-run and scsi-bad-request
 * (vu-client-scsi-run.c).  CmdRun handlers (vu-client-cmd.h) and what the
 * parser needs to check scsi-bad-request's KIND; main thread.
 */
#ifndef SPINDLE_TOOLS_VU_CLIENT_SCSI_RUN_H
#define SPINDLE_TOOLS_VU_CLIENT_SCSI_RUN_H

#include <stdbool.h>

#include "vu-client-cmd.h"

CmdHandler cmd_scsi_verify_run, cmd_scsi_bad_request;
bool scsi_bad_request_kind_valid(const char *name);
/* The names `scsi-bad-request` accepts ("a, b, c"). Caller frees. */
char *scsi_bad_request_kinds(void);

#endif
