/*
 * The main() of a unit test program whose tests are one TestCase table
 * (test-helpers.h): set up GLib's test framework, register the table
 * under the watchdog, run.  A header only, so that a program needs no
 * other link than test-helpers.
 */
#ifndef TESTS_UNIT_TEST_MAIN_H
#define TESTS_UNIT_TEST_MAIN_H

#include <glib.h>
#include "test-helpers.h"

/*
 * Run tests[0..n-1], each under a watchdog of watchdog_s seconds (below the
 * program's meson timeout, so that the watchdog reports first); returns
 * g_test_run()'s exit status.  Main thread, once.
 */
static inline int test_main(int argc, char **argv, const TestCase *tests,
                            size_t n, unsigned watchdog_s)
{
    g_test_init(&argc, &argv, NULL);
    test_add_with_watchdog(tests, n, watchdog_s);
    return g_test_run();
}

#endif
