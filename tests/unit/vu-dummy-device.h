/*
 * The dummy vhost-user device of the vhost-user server tests
 * (test-vhost-user-server with a socket, test-vhost-user-handlers
 * without): a feature bit, a 16-byte config space whose first 8 bytes
 * are writable, and queues that echo what the driver sends.  It counts
 * what the server asks of it.
 *
 * With main_ctx set (dummy_new()), it also checks the threads the server
 * calls it in: config and features in main_ctx's home thread, queue
 * callbacks in their ring's context and in neither the main one nor the
 * test's (test_thread); a wrong queue thread is counted in wrong_thread,
 * which dummy_free() asserts is zero.  Without (dummy_init()), the server
 * may call it from any thread.
 */
#ifndef TESTS_UNIT_VU_DUMMY_DEVICE_H
#define TESTS_UNIT_VU_DUMMY_DEVICE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "hw/virtio/vhost-user-server.h"
#include "util/aio.h"

#define DUMMY_FEATURE_BIT 5
#define DUMMY_CONFIG_LEN 16

typedef struct Dummy {
    AioContext *main_ctx;              /* NULL: no thread checks */
    pthread_t test_thread;
    _Atomic int set_features_calls;
    _Atomic uint64_t features;
    _Atomic int started;
    _Atomic int drained;
    _Atomic int handled;
    _Atomic int pop_errors;
    _Atomic int wrong_thread;
    _Atomic int set_config_calls;
    uint8_t config[DUMMY_CONFIG_LEN];  /* the server's main thread only */
} Dummy;

/* Its callbacks; dev is a Dummy. */
extern const VuDevOps dummy_ops;

/* Reset *d: nothing counted, config "spindle-dummy-01", no thread checks. */
void dummy_init(Dummy *d);

/*
 * A new Dummy whose callbacks check their threads against main_ctx (the
 * server's main context) and test_thread (the test's own).  Free it with
 * dummy_free().
 */
Dummy *dummy_new(AioContext *main_ctx, pthread_t test_thread);

/* Assert that no queue callback ran in a wrong thread; free d. */
void dummy_free(Dummy *d);

#endif
