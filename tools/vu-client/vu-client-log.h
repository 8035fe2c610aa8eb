/*
 * spindle-vu-client: dirty page logging as a migration drives it
 * (vu-client-log.c).  Main thread.
 */
#ifndef SPINDLE_TOOLS_VU_CLIENT_LOG_H
#define SPINDLE_TOOLS_VU_CLIENT_LOG_H

#include <stdbool.h>

#include "vu-client-cmd.h"
#include "vu-client-result.h"

/* log-start, log-stop, log-dirty: CmdRun handlers (vu-client-cmd.h). */
CmdHandler cmd_log_start, cmd_log_stop, cmd_log_dirty;

/* Whether a command on the line needs LOG_SHMFD negotiated. */
bool client_wants_dirty_log(const ClientOpts *o);

/* Member "dirty_log": what fe knows of dirty logging. */
void res_dirty_log(Result *r, VuFrontend *fe);

/* Free the session's dirty-log bitmaps (at the end). */
void client_log_free(Client *c);

#endif
