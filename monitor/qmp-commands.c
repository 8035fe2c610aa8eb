/*
 * The QMP command tables of every monitor/ module, registered at once.
 *
 * Each module registers its own commands in its qmp_register_*_commands();
 * this file only lists them.  Main thread.
 */
#include <stdbool.h>

#include "monitor/qmp.h"

void qmp_register_all_commands(void)
{
    static bool done;

    if (done) {
        return;
    }
    done = true;
    qmp_register_core_commands();
    qmp_register_iothread_commands();
    qmp_register_block_commands();
    qmp_register_export_commands();
}
