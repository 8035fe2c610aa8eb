/*
 * spindle-vu-client: bad-request, malformed virtio-blk requests
 * (vu-client-bad.c).  A CmdRun handler (vu-client-cmd.h) and what the
 * parser needs to check its KIND; main thread.
 */
#ifndef SPINDLE_TOOLS_VU_CLIENT_BAD_H
#define SPINDLE_TOOLS_VU_CLIENT_BAD_H

#include <stdbool.h>

#include "vu-client-cmd.h"

CmdHandler cmd_bad_request;
bool bad_request_kind_valid(const char *name);
/* The names `bad-request` accepts ("a, b, c"). Caller frees. */
char *bad_request_kinds(void);

#endif
