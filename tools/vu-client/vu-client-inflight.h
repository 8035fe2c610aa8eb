/*
 * spindle-vu-client: requests left in flight, and going on after the
 * back-end died (vu-client-inflight.c).  Main thread.
 */
#ifndef SPINDLE_TOOLS_VU_CLIENT_INFLIGHT_H
#define SPINDLE_TOOLS_VU_CLIENT_INFLIGHT_H

#include <stdbool.h>

#include "vu-client-cmd.h"
#include "vu-client-result.h"

/* resume: a CmdRun handler (vu-client-cmd.h). */
CmdHandler cmd_resume;

/*
 * write --no-wait and scsi-write --no-wait: add cmd's write as one request
 * with a buffer of its own, kick, and leave it in flight (outstanding)
 * for a later resume, or any later command on its queue, to collect.
 * False with errp set if it cannot be allocated or added.
 */
bool client_submit_write(Client *c, const Command *cmd, Result *r,
                         Error **errp);

/* Requests submitted without waiting whose completion has not come. */
unsigned client_outstanding(const Client *c);

/* Member "inflight": what fe knows of its inflight region. */
void res_inflight(Result *r, VuFrontend *fe);

/* Free the outstanding requests' records and buffers (at the end). */
void client_inflight_free(Client *c);

#endif
