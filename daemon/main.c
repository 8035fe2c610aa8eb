/*
 * spindle: the daemon's command line, start-up, main loop and shutdown.
 * This is the top layer; docs/devel/architecture.md describes the ones
 * below it.
 *
 * Theory of operation
 * -------------------
 * The command line follows qemu-storage-daemon's (docs/cli.md):
 *
 *   spindle [--object iothread,...] [--blockdev ...] [--export ...]
 *           [--chardev socket,...] [--monitor ...] [--pidfile PATH]
 *           [--daemonize] [--config FILE]
 *
 * It is read in two passes.  The first (getopt) only collects the options
 * in order and handles what needs nothing started: --help, --version,
 * --object help, and options Spindle does not have.  Then, with
 * --daemonize, the process forks *before* creating any thread (a fork
 * keeps only the calling thread, so it cannot come after the IOThreads
 * exist): the child does all the work and tells the parent through a pipe
 * when it is ready; the parent exits 0 then, or with the child's status if
 * the child fails first.  Its error messages reach the terminal because
 * the child redirects its stdio to /dev/null only once it is ready.
 *
 * --config FILE holds the same options as JSON (daemon/config.c); the
 * first pass reads it and puts its entries where --config stands, so
 * that the second pass cannot tell them from the command line's except
 * in its messages, which name the file and the entry.
 *
 * Sockets that systemd passes (LISTEN_FDS) are taken before the fork,
 * while LISTEN_PID still names this process (util/listen-fds.h); the
 * options find them by name.  Once every option is processed (and the
 * monitors waited for, below) the daemon tells the service manager
 * READY=1, and STOPPING=1 when it begins to shut down (daemon/notify.c).
 *
 * The second pass creates things in the order given, so an --export can
 * use only the --blockdev and --object options before it.  The first error
 * prints one line, "spindle: --OPTION: message", deletes everything created
 * so far, and exits 1.  After the last option the pid file is written; the
 * daemon then counts as started.
 *
 * The main thread runs an AioContext of its own (sockets and protocol
 * messages of the exports live there).  SIGTERM, SIGINT and SIGHUP are
 * blocked in every thread (the mask is set before any thread exists) and
 * read from a signalfd registered in that context; the first one ends the
 * loop.  Shutdown then deletes the exports (each drains its queues,
 * disconnects its front-end and removes its socket), drops the nodes,
 * stops the IOThreads, removes the pid file and exits 0.  SIGPIPE is
 * ignored: a front-end that goes away is seen as an error on the socket.
 * SIGUSR1 (and the shutdown) prints one line of loop statistics per
 * IOThread on stderr.
 *
 * The nodes --blockdev creates are the user's (export/blockdev.c): QMP
 * blockdev-add and blockdev-del add to and take from the same list.
 *
 * --chardev only records a socket's options; each --monitor starts a QMP
 * server (monitor/qmp-server.c) on one of them, in the main loop's
 * context, at once, so that the monitors exist while the rest of the
 * command line is processed (a chardev no monitor uses is created
 * nowhere).  The "quit" command stops the daemon the way SIGTERM does.
 * With wait=on (the default, as QEMU's server=on), once every option is
 * processed and before the pid file is written and the parent of
 * --daemonize is released, the main loop runs until each such monitor has
 * had a client connect (a stop signal or "quit" still ends it).  Before
 * shutdown the SHUTDOWN event goes to the clients; the monitors close
 * after the exports and nodes, so events from their teardown still reach
 * them, and their last output is flushed.
 *
 * Threads: all of this is the main thread.
 */
#include "config-host.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>
#include <glib.h>
#include <json-glib/json-glib.h>

#include "block/block.h"
#include "export/blockdev.h"
#include "export/export.h"
#include "monitor/qmp.h"
#include "util/main-thread.h"
#include "util/aio.h"
#include "util/error.h"
#include "util/iothread.h"
#include "util/listen-fds.h"
#include "util/object.h"
#include "util/throttle-group.h"
#include "util/opts.h"
#include "daemon/config.h"
#include "daemon/notify.h"

enum {
    OPT_OBJECT = 256,
    OPT_BLOCKDEV,
    OPT_EXPORT,
    OPT_CHARDEV,
    OPT_MONITOR,
    OPT_PIDFILE,
    OPT_DAEMONIZE,
    OPT_NBD_SERVER,
    OPT_CONFIG,
};

static const struct option daemon_long_options[] = {
    { "help", no_argument, NULL, 'h' },
    { "version", no_argument, NULL, 'V' },
    { "trace", required_argument, NULL, 'T' },
    { "object", required_argument, NULL, OPT_OBJECT },
    { "blockdev", required_argument, NULL, OPT_BLOCKDEV },
    { "export", required_argument, NULL, OPT_EXPORT },
    { "chardev", required_argument, NULL, OPT_CHARDEV },
    { "monitor", required_argument, NULL, OPT_MONITOR },
    { "pidfile", required_argument, NULL, OPT_PIDFILE },
    { "daemonize", no_argument, NULL, OPT_DAEMONIZE },
    { "nbd-server", required_argument, NULL, OPT_NBD_SERVER },
    { "config", required_argument, NULL, OPT_CONFIG },
    { NULL, 0, NULL, 0 },
};

/* One option of the command line or of a --config file, in order. */
typedef struct CliOption {
    int opt;
    const char *name;            /* "export", for messages */
    const char *arg;             /* borrowed from argv or from a
                                  * DaemonConfigEntry; NULL if none */
    const char *label;           /* a --config entry's "FILE: export[2]",
                                  * for messages; NULL: command line */
} CliOption;

/* A --chardev: a socket for a QMP monitor, and the --monitor on it. */
typedef struct ChardevConf {
    char *id;
    char *path;                  /* or NULL with fd >= 0 */
    int fd;                      /* -1 once a monitor has taken it */
    bool fd_borrowed;            /* fd is a socket systemd passed: the
                                  * monitor gets a duplicate */
    bool server;
    bool wait;
    QmpServer *monitor;          /* its --monitor's server; NULL: none */
    char *where;                 /* with a monitor: the socket, for
                                  * messages */
} ChardevConf;

typedef struct Daemon {
    AioContext *ctx;             /* the main loop's */
    GPtrArray *chardevs;         /* ChardevConf * */
    GPtrArray *monitors;         /* ChardevConf * with a monitor, in
                                  * --monitor order (borrowed) */
    GPtrArray *config_entries;   /* DaemonConfigEntry *, of every
                                  * --config: the CliOptions borrow them */

    const char *pidfile;         /* NULL: none */
    int pidfile_fd;              /* open and locked while we run */
    bool daemonize;
    int ready_fd;                /* --daemonize: write end of the pipe */

    int sigfd;
    bool quit;
    const char *quit_reason;     /* the SHUTDOWN event's: "host-signal", ... */
} Daemon;

/* ------------------------------------------------------------------------ */
/* --help, --version                                                         */

static void daemon_print_help(void)
{
    printf(
"Usage: spindle [options]\n"
"Serve disk images to virtual machines over vhost-user.\n"
"\n"
"  -h, --help             print this help and exit\n"
"  -V, --version          print the version and exit\n"
"  --object iothread,id=ID[,poll-max-ns=NS][,poll-grow=N][,poll-shrink=N]\n"
"           [,poll-weight=N][,aio-max-batch=N][,cpu-affinity=CPUS]\n"
"           [,poll-policy=predictive|fixed|qemu-classic|qemu-weighted]\n"
"                         create an IOThread (--object help,\n"
"                         --object iothread,help: list types, properties)\n"
"  --object throttle-group,id=ID[,x-iops-total=N][,x-bps-total=N]\n"
"           [,x-iops-read=N][,x-bps-write-max=N][,...][,x-iops-size=N]\n"
"                         I/O limits that throttle nodes share\n"
"                         (--object throttle-group,help: the properties)\n"
"  --blockdev OPTIONS     open a block node: key=value pairs or JSON, e.g.\n"
"                         driver=file,node-name=disk0,filename=vm.img\n"
"  --export [type=]vhost-user-blk,id=ID,node-name=NODE,\n"
"           addr.type=unix,addr.path=SOCKET (or addr.type=fd,addr.str=FD;\n"
"           FD: a number, or the name of a socket systemd passed)\n"
"           [,writable=on|off][,num-queues=N][,logical-block-size=N]\n"
"           [,iothread=ID][,serial=S][,writethrough=on|off]\n"
"           [,fixed-iothread=on|off][,allow-inactive=on|off]\n"
"                         serve a node to a vhost-user front-end (QEMU)\n"
"  --export [type=]vhost-user-scsi,id=ID,addr...[,num-queues=N]\n"
"           [,iothread=ID][,writethrough=on|off][,fixed-iothread=on|off]\n"
"           [,allow-inactive=on|off],\n"
"           lun.0.node-name=NODE[,lun.0.writable=on|off][,lun.0.serial=S]\n"
"           [,lun.0.wwn=0xHEX][,lun.0.vendor=V][,lun.0.product=P]\n"
"           [,lun.0.logical-block-size=512|4096][,lun.1=NODE...]\n"
"                         serve nodes as the LUNs of a virtio-scsi device\n"
"  --chardev socket,id=ID,path=PATH,server=on[,wait=on|off]\n"
"                         a socket for a QMP monitor (fd=N or fd=NAME\n"
"                         instead of path: an inherited listening socket,\n"
"                         NAME one systemd passed); wait=on (the\n"
"                         default) waits for a client before starting\n"
"  --monitor [chardev=]ID[,pretty=on|off]\n"
"                         serve the QMP monitor on that chardev (any number\n"
"                         of monitors and clients; quit stops the daemon)\n"
"  --config FILE          read --object, --blockdev, --chardev, --monitor\n"
"                         and --export options from a JSON file, e.g.\n"
"                         {\"blockdev\": [{...}], \"export\": [{...}]}\n"
"  --pidfile PATH         write the daemon's pid to PATH once it has\n"
"                         started (locked; removed at exit)\n"
"  --daemonize            run in the background; return once started\n"
"\n"
"Options are processed in order: an --export may use only the nodes and\n"
"IOThreads defined before it.  SIGTERM, SIGINT or SIGHUP stops the daemon\n"
"cleanly; SIGUSR1 prints IOThread statistics on stderr.  The full\n"
"reference is docs/cli.md.\n");
}

static void daemon_print_version(void)
{
    printf("spindle %s\n", SPINDLE_VERSION);
}

/* ------------------------------------------------------------------------ */
/* First pass: collect the options                                           */

/* The length of "--foo" in "--foo=bar", for messages. */
static int daemon_option_name_len(const char *argv_elem)
{
    const char *eq = strchr(argv_elem, '=');

    return eq ? (int)(eq - argv_elem) : (int)strlen(argv_elem);
}

static const char *daemon_long_name(int opt)
{
    for (int i = 0; daemon_long_options[i].name; i++) {
        if (daemon_long_options[i].val == opt) {
            return daemon_long_options[i].name;
        }
    }
    return "?";
}

static G_NORETURN void daemon_usage_error(const char *fmt, ...)
    G_GNUC_PRINTF(1, 2);

static G_NORETURN void daemon_usage_error(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    error_vreport(fmt, ap);
    va_end(ap);
    exit(1);
}

/* The option a --config key stands for. */
static int daemon_option_for_key(const char *key)
{
    for (int i = 0; daemon_long_options[i].name; i++) {
        if (!strcmp(daemon_long_options[i].name, key)) {
            return daemon_long_options[i].val;
        }
    }
    g_assert_not_reached();
}

/* --config FILE: its entries, as options, go to out where it stands. */
static void daemon_read_config(Daemon *d, const char *path, GArray *out)
{
    guint first = d->config_entries->len;
    Error *err = NULL;

    if (!daemon_config_load(path, d->config_entries, &err)) {
        daemon_usage_error("--config %s", error_get_pretty(err));
    }
    for (guint i = first; i < d->config_entries->len; i++) {
        const DaemonConfigEntry *e = g_ptr_array_index(d->config_entries, i);
        CliOption o = {
            .opt = daemon_option_for_key(e->key),
            .name = e->key,
            .arg = e->arg,
            .label = e->label,
        };

        g_array_append_val(out, o);
    }
}

/*
 * Collect the options that act when they are processed, in order, into
 * out; set the flags; handle --help and friends.  Exits on a usage error.
 */
static void daemon_collect_options(int argc, char **argv, Daemon *d,
                                   GArray *out)
{
    g_autofree char *help = NULL;
    int opt;

    opterr = 0;
    while ((opt = getopt_long(argc, argv, "+:hVT:", daemon_long_options,
                              NULL)) != -1) {
        CliOption o = { .opt = opt, .arg = optarg };
        const char *elem = argv[optind - 1];

        switch (opt) {
        case 'h':
            daemon_print_help();
            exit(0);
        case 'V':
            daemon_print_version();
            exit(0);
        case 'T':
            daemon_usage_error("--trace: not supported: Spindle's trace "
                               "points are USDT probes that a tracer "
                               "(bpftrace, perf) enables by attaching to "
                               "them (see docs/cli.md)");
        case OPT_NBD_SERVER:
            daemon_usage_error("--nbd-server: not supported: Spindle "
                               "serves vhost-user exports only");
        case OPT_PIDFILE:
            d->pidfile = optarg;
            break;
        case OPT_DAEMONIZE:
            d->daemonize = true;
            break;
        case OPT_CONFIG:
            daemon_read_config(d, optarg, out);
            break;
        case OPT_OBJECT:
            help = object_option_help(optarg);
            if (help) {
                fputs(help, stdout);
                exit(0);
            }
            /* fall through */
        case OPT_BLOCKDEV:
        case OPT_EXPORT:
        case OPT_CHARDEV:
        case OPT_MONITOR:
            o.name = daemon_long_name(opt);
            g_array_append_val(out, o);
            break;
        case ':':
            daemon_usage_error("%.*s: option requires an argument (see "
                               "spindle --help)",
                               daemon_option_name_len(elem), elem);
        default:
            if (optopt) {
                daemon_usage_error("-%c: unknown option (see spindle --help)",
                                   optopt);
            }
            daemon_usage_error("%.*s: unknown option (see spindle --help)",
                               daemon_option_name_len(elem), elem);
        }
    }
    if (optind < argc) {
        daemon_usage_error("unexpected argument '%s': every argument is an "
                           "option (see spindle --help)", argv[optind]);
    }
}

/* ------------------------------------------------------------------------ */
/* --object                                                                  */

/* iothread,id=ID,... or throttle-group,id=ID,..., or the JSON form
 * (util/object.c picks the type). */
static bool daemon_add_object(Daemon *d, const char *arg, Error **errp)
{
    return object_create_from_option(arg, errp);
}

/* ------------------------------------------------------------------------ */
/* --blockdev, --export                                                      */

static bool daemon_add_blockdev(Daemon *d, const char *arg, Error **errp)
{
    return blockdev_add_str(arg, d->ctx, errp) != NULL;
}

static bool daemon_add_export(Daemon *d, const char *arg, Error **errp)
{
    g_autoptr(Opts) opts = export_opts_parse(arg, errp);

    return opts && export_create(opts, d->ctx, errp);
}

/* ------------------------------------------------------------------------ */
/* --chardev, --monitor                                                      */

static void chardev_conf_free(gpointer p)
{
    ChardevConf *c = p;

    qmp_server_free(c->monitor);
    g_free(c->id);
    g_free(c->path);
    g_free(c->where);
    g_free(c);
}

static ChardevConf *daemon_find_chardev(Daemon *d, const char *id)
{
    for (guint i = 0; i < d->chardevs->len; i++) {
        ChardevConf *c = g_ptr_array_index(d->chardevs, i);

        if (!strcmp(c->id, id)) {
            return c;
        }
    }
    return NULL;
}

static bool daemon_add_chardev(Daemon *d, const char *arg, Error **errp)
{
    g_autoptr(Opts) opts = opts_parse(arg, "backend", errp);
    const char *backend, *id, *path, *fd_str;
    int fd = -1;
    bool fd_borrowed = false;
    bool server, wait;
    ChardevConf *c;

    if (!opts ||
        !opts_get_str(opts, "backend", NULL, &backend, errp) ||
        !opts_get_str(opts, "id", NULL, &id, errp) ||
        !opts_get_str(opts, "path", NULL, &path, errp) ||
        !opts_get_str(opts, "fd", NULL, &fd_str, errp) ||
        !opts_get_bool(opts, "server", false, &server, errp) ||
        !opts_get_bool(opts, "wait", true, &wait, errp)) {
        return false;
    }
    if (!backend) {
        error_setg(errp, "the chardev type is missing (socket,id=...)");
        return false;
    }
    if (strcmp(backend, "socket")) {
        error_setg(errp, "chardev type '%s' is not supported (only 'socket', "
                   "for the QMP monitor)", backend);
        return false;
    }
    if (!id || !*id) {
        error_setg(errp, "Parameter 'id' is missing");
        return false;
    }
    if (daemon_find_chardev(d, id)) {
        error_setg(errp, "a chardev with id '%s' already exists", id);
        return false;
    }
    if (!opts_check_unused(opts, NULL, errp)) {
        return false;
    }
    if ((path != NULL) == (fd_str != NULL)) {
        error_setg(errp, "give exactly one of 'path' (a UNIX socket to "
                   "create) and 'fd' (an inherited listening socket)");
        return false;
    }
    if (fd_str) {
        fd = listen_fds_lookup("fd", fd_str, &fd_borrowed, errp);
        if (fd < 0) {
            return false;
        }
    }
    if (path && !*path) {
        error_setg(errp, "Parameter 'path' must not be empty");
        return false;
    }
    if (!server) {
        error_setg(errp, "server=off (connecting out) is not supported; use "
                   "server=on");
        return false;
    }
    c = g_new0(ChardevConf, 1);
    c->id = g_strdup(id);
    c->path = g_strdup(path);
    c->fd = fd;
    c->fd_borrowed = fd_borrowed;
    c->server = server;
    c->wait = wait;
    g_ptr_array_add(d->chardevs, c);
    return true;
}

static bool daemon_add_monitor(Daemon *d, const char *arg, Error **errp)
{
    static const char *const modes[] = { "control", "readline", NULL };
    g_autoptr(Opts) opts = opts_parse(arg, "chardev", errp);
    const char *chardev;
    bool pretty;
    int mode;
    ChardevConf *c;
    QmpServerConfig cfg = { .listen_fd = -1 };

    if (!opts ||
        !opts_get_str(opts, "chardev", NULL, &chardev, errp) ||
        !opts_get_enum(opts, "mode", modes, 0, &mode, errp) ||
        !opts_get_bool(opts, "pretty", false, &pretty, errp) ||
        !opts_check_unused(opts, NULL, errp)) {
        return false;
    }
    if (!chardev) {
        error_setg(errp, "Parameter 'chardev' is missing");
        return false;
    }
    if (mode != 0) {
        error_setg(errp, "Parameter 'mode': only 'control' (QMP) monitors "
                   "are supported");
        return false;
    }
    c = daemon_find_chardev(d, chardev);
    if (!c) {
        error_setg(errp, "Parameter 'chardev': there is no chardev '%s' "
                   "(define it with an earlier --chardev)", chardev);
        return false;
    }
    if (c->monitor) {
        error_setg(errp, "Parameter 'chardev': chardev '%s' is already "
                   "used by another --monitor (define one --chardev "
                   "per monitor)", chardev);
        return false;
    }
    cfg.path = c->path;
    cfg.listen_fd = c->fd;
    if (c->fd_borrowed) {
        /* The server takes the fd it is given; systemd's stays open. */
        cfg.listen_fd = fcntl(c->fd, F_DUPFD_CLOEXEC, 3);
        if (cfg.listen_fd < 0) {
            error_setg_errno(errp, errno, "Cannot duplicate file descriptor "
                             "%d", c->fd);
            return false;
        }
    }
    cfg.pretty = pretty;
    cfg.name = c->id;
    c->monitor = qmp_server_new(&cfg, d->ctx, errp);
    if (!c->monitor) {
        if (c->fd_borrowed) {
            close(cfg.listen_fd);
        }
        return false;
    }
    c->where = c->path ? g_strdup(c->path) : g_strdup_printf("fd %d", c->fd);
    g_ptr_array_add(d->monitors, c);
    c->fd = -1;                  /* the server has it now */
    return true;
}

/* ------------------------------------------------------------------------ */
/* Second pass                                                               */

static bool daemon_process_option(Daemon *d, const CliOption *o,
                                  Error **errp)
{
    switch (o->opt) {
    case OPT_OBJECT:
        return daemon_add_object(d, o->arg, errp);
    case OPT_BLOCKDEV:
        return daemon_add_blockdev(d, o->arg, errp);
    case OPT_EXPORT:
        return daemon_add_export(d, o->arg, errp);
    case OPT_CHARDEV:
        return daemon_add_chardev(d, o->arg, errp);
    case OPT_MONITOR:
        return daemon_add_monitor(d, o->arg, errp);
    }
    g_assert_not_reached();
}

/* ------------------------------------------------------------------------ */
/* Pid file                                                                  */

static bool daemon_write_pidfile(Daemon *d, Error **errp)
{
    struct flock lock = { .l_type = F_WRLCK, .l_whence = SEEK_SET };
    g_autofree char *text = NULL;
    ssize_t len;
    int fd;

    fd = open(d->pidfile, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        error_setg_errno(errp, errno, "Cannot open pid file '%s'",
                         d->pidfile);
        return false;
    }
    if (fcntl(fd, F_SETLK, &lock) < 0) {
        int err = errno;

        close(fd);
        if (err == EAGAIN || err == EACCES) {
            error_setg(errp, "Cannot lock pid file '%s': another spindle "
                       "is running with it", d->pidfile);
        } else {
            error_setg_errno(errp, err, "Cannot lock pid file '%s'",
                             d->pidfile);
        }
        return false;
    }
    text = g_strdup_printf("%d\n", (int)getpid());
    len = (ssize_t)strlen(text);
    if (ftruncate(fd, 0) < 0 || write(fd, text, len) != len) {
        error_setg_errno(errp, errno, "Cannot write pid file '%s'",
                         d->pidfile);
        unlink(d->pidfile);
        close(fd);
        return false;
    }
    d->pidfile_fd = fd;
    return true;
}

static void daemon_remove_pidfile(Daemon *d)
{
    if (d->pidfile_fd < 0) {
        return;
    }
    /* Unlink while still holding the lock, so nobody else's file goes. */
    unlink(d->pidfile);
    close(d->pidfile_fd);
    d->pidfile_fd = -1;
}

/* ------------------------------------------------------------------------ */
/* --daemonize                                                               */

/*
 * Fork.  The parent waits until the child reports that it started (one
 * byte on the pipe) and exits 0, or until the child exits first, and
 * exits with its status.  Returns in the child only.
 */
static void daemon_fork(Daemon *d)
{
    int fds[2];
    pid_t pid;
    char byte;
    ssize_t n;
    int status;

    if (pipe2(fds, O_CLOEXEC) < 0) {
        daemon_usage_error("--daemonize: cannot create a pipe: %s",
                           strerror(errno));
    }
    fflush(NULL);
    pid = fork();
    if (pid < 0) {
        daemon_usage_error("--daemonize: cannot fork: %s", strerror(errno));
    }
    if (pid == 0) {
        close(fds[0]);
        d->ready_fd = fds[1];
        if (setsid() < 0) {
            daemon_usage_error("--daemonize: setsid failed: %s",
                               strerror(errno));
        }
        return;
    }
    close(fds[1]);
    do {
        n = read(fds[0], &byte, 1);
    } while (n < 0 && errno == EINTR);
    if (n == 1) {
        exit(0);
    }
    /* The child exited (or closed the pipe) without starting. */
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        continue;
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) != 0) {
        exit(WEXITSTATUS(status));
    }
    exit(1);
}

/* The child has started: detach from the terminal and release the parent. */
static void daemon_detach(Daemon *d)
{
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    char byte = 0;

    if (null >= 0) {
        dup2(null, STDIN_FILENO);
        dup2(null, STDOUT_FILENO);
        dup2(null, STDERR_FILENO);
        close(null);
    }
    if (write(d->ready_fd, &byte, 1) != 1) {
        /* The parent is gone; nobody is waiting for us.  Carry on. */
    }
    close(d->ready_fd);
    d->ready_fd = -1;
}

/* ------------------------------------------------------------------------ */
/* Signals                                                                   */

/*
 * One line per export with its nodes' write counters (summed), one per
 * node when it has several (vhost-user-scsi: one per LUN), and one per
 * queue:
 *   spindle: export e0 stats: locked_writes=N rmw_writes=N
 *   spindle: export e0 node disk1 stats: locked_writes=N rmw_writes=N
 *   spindle: export e0 queue 0 stats: iothread=iot0 requests=N kicks=N ...
 */
static void daemon_print_export_stats(Export *exp, void *opaque)
{
    unsigned nnodes = export_get_num_nodes(exp);
    BlockWriteStats sum = { 0 };

    for (unsigned i = 0; i < nnodes; i++) {
        BlockWriteStats ws;

        block_node_get_write_stats(export_get_nth_node(exp, i), &ws);
        sum.locked_writes += ws.locked_writes;
        sum.rmw_writes += ws.rmw_writes;
    }
    error_report("export %s stats: locked_writes=%" PRIu64 " rmw_writes=%"
                 PRIu64, export_get_id(exp), sum.locked_writes,
                 sum.rmw_writes);
    for (unsigned i = 0; nnodes > 1 && i < nnodes; i++) {
        BlockNode *bs = export_get_nth_node(exp, i);
        BlockWriteStats ws;

        block_node_get_write_stats(bs, &ws);
        error_report("export %s node %s stats: locked_writes=%" PRIu64
                     " rmw_writes=%" PRIu64, export_get_id(exp),
                     block_node_get_name(bs), ws.locked_writes,
                     ws.rmw_writes);
    }
    for (unsigned i = 0; i < export_get_num_queues(exp); i++) {
        ExportQueueStats st;

        if (export_get_queue_stats(exp, i, &st)) {
            error_report("export %s queue %u stats: iothread=%s requests=%"
                         PRIu64 " kicks=%" PRIu64 " polled=%" PRIu64
                         " interrupts=%" PRIu64 " interrupts_suppressed=%"
                         PRIu64, export_get_id(exp), i,
                         st.iothread ? st.iothread : "main-loop", st.requests,
                         st.kicks, st.polled, st.interrupts,
                         st.interrupts_suppressed);
        }
    }
}

/*
 * One line per IOThread on stderr with its loop counters, then the
 * exports' (until the QMP monitor's query commands exist, this is how to
 * read them).
 */
static void daemon_print_iothread_stats(void)
{
    g_autoptr(GPtrArray) list = iothread_list();

    for (guint i = 0; i < list->len; i++) {
        IOThread *iot = g_ptr_array_index(list, i);
        AioPollStats st;

        aio_context_get_stats(iothread_get_aio_context(iot), &st);
        error_report("iothread %s stats: turns=%" PRIu64 " poll_ns=%" PRId64
                     " poll_hits=%" PRIu64 " poll_misses=%" PRIu64
                     " wakeups=%" PRIu64 " poll_time_ns=%" PRIu64
                     " block_time_ns=%" PRIu64 " grows=%" PRIu64
                     " shrinks=%" PRIu64 " dispatches=%" PRIu64 " bhs=%"
                     PRIu64 " timers=%" PRIu64 " naps=%" PRIu64
                     " cpu_ns=%" PRId64,
                     iothread_get_id(iot), st.turns, st.poll_ns,
                     st.poll_hits, st.poll_misses, st.wakeups,
                     st.poll_time_ns, st.block_time_ns, st.grows,
                     st.shrinks, st.dispatches, st.bhs, st.timers, st.naps,
                     iothread_get_cpu_ns(iot));
    }
    export_foreach(daemon_print_export_stats, NULL);
}

static void daemon_signal_read(void *opaque)
{
    Daemon *d = opaque;
    struct signalfd_siginfo info;

    g_assert(aio_context_in_home_thread(d->ctx));
    while (read(d->sigfd, &info, sizeof(info)) == sizeof(info)) {
        if (info.ssi_signo == SIGUSR1) {
            daemon_print_iothread_stats();
        } else if (!d->quit) {
            d->quit = true;
            d->quit_reason = "host-signal";
        }
    }
}

/*
 * Block the stop signals in this thread, before any other thread exists
 * (they inherit the mask), and open a signalfd for them.
 */
static void daemon_setup_signals(Daemon *d)
{
    sigset_t set;

    signal(SIGPIPE, SIG_IGN);
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    sigaddset(&set, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    d->sigfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    if (d->sigfd < 0) {
        daemon_usage_error("cannot create a signalfd: %s", strerror(errno));
    }
}

/* ------------------------------------------------------------------------ */
/* Start-up and shutdown                                                     */

/* Stop chardev p's monitor (flushing its last output). */
static void daemon_close_monitor(gpointer p, gpointer unused)
{
    ChardevConf *c = p;

    g_clear_pointer(&c->monitor, qmp_server_free);
}

/* Delete everything created, newest first. */
static void daemon_teardown(Daemon *d)
{
    g_autoptr(GPtrArray) iothreads = NULL;

    export_delete_all();
    blockdev_del_all();
    /* After the exports and nodes: events from their teardown still have
     * somewhere to go. */
    g_ptr_array_foreach(d->monitors, daemon_close_monitor, NULL);
    g_ptr_array_set_size(d->monitors, 0);
    qmp_set_quit_handler(NULL, NULL);
    iothreads = iothread_list();
    for (guint i = iothreads->len; i-- > 0;) {
        iothread_destroy(g_ptr_array_index(iothreads, i));
    }
    throttle_group_destroy_all();       /* no node uses them any more */
    daemon_remove_pidfile(d);
    listen_fds_cleanup();
    aio_set_fd_handler(d->ctx, d->sigfd, NULL, NULL, NULL, NULL, NULL);
    close(d->sigfd);
    g_ptr_array_unref(d->chardevs);
    g_ptr_array_unref(d->monitors);
    g_ptr_array_unref(d->config_entries);
    main_loop_set_context(NULL);
    aio_context_unref(d->ctx);
}

static G_NORETURN void daemon_fail(Daemon *d, const char *option, Error *err)
{
    if (option) {
        error_report("%s: %s", option, error_get_pretty(err));
    } else {
        error_report("%s", error_get_pretty(err));
    }
    error_free(err);
    daemon_teardown(d);
    exit(1);
}

/* QMP "quit": stop as SIGTERM does (called from a BH in the main loop). */
static void daemon_qmp_quit(void *opaque)
{
    Daemon *d = opaque;

    g_assert(aio_context_in_home_thread(d->ctx));
    if (!d->quit) {
        d->quit = true;
        d->quit_reason = "host-qmp-quit";
    }
    aio_notify(d->ctx);
}

/* Whether every wait=on monitor has had a client. */
static bool daemon_monitors_waiting(Daemon *d)
{
    for (guint i = 0; i < d->monitors->len; i++) {
        ChardevConf *c = g_ptr_array_index(d->monitors, i);

        if (c->wait && qmp_server_num_accepted(c->monitor) == 0) {
            return true;
        }
    }
    return false;
}

/*
 * wait=on: run the loop until each such monitor has had a client connect
 * (or a stop signal or "quit" came).
 */
static void daemon_wait_for_monitors(Daemon *d)
{
    if (!daemon_monitors_waiting(d)) {
        return;
    }
    for (guint i = 0; i < d->monitors->len; i++) {
        ChardevConf *c = g_ptr_array_index(d->monitors, i);

        if (c->wait) {
            error_report("waiting for a QMP client on %s", c->where);
            daemon_notify_status("waiting for a QMP client on %s", c->where);
        }
    }
    while (!d->quit && daemon_monitors_waiting(d)) {
        aio_poll(d->ctx, true);
    }
}

static void daemon_count_export(Export *exp, void *opaque)
{
    (*(unsigned *)opaque)++;
}

/*
 * Every option is processed: warn about sockets systemd passed that
 * nothing uses (a typo in a name, most likely).
 */
static void daemon_warn_unused_fds(void)
{
    g_autofree char *unused = listen_fds_describe_unused();

    if (unused) {
        error_report("warning: sockets passed by the service manager that "
                     "no export or monitor uses: %s", unused);
    }
}

/* Started: every export and monitor listens.  Tell the service manager. */
static void daemon_notify_started(Daemon *d)
{
    unsigned nexports = 0;

    export_foreach(daemon_count_export, &nexports);
    daemon_notify_ready(nexports, d->monitors->len);
}

/* The SHUTDOWN event, as QEMU sends it when the host stops it. */
static void daemon_emit_shutdown(Daemon *d)
{
    g_autoptr(JsonObject) data = json_object_new();

    json_object_set_boolean_member(data, "guest", false);
    json_object_set_string_member(data, "reason",
                                  d->quit_reason ? d->quit_reason :
                                  "host-signal");
    qmp_event_emit("SHUTDOWN", data);
}

int main(int argc, char **argv)
{
    g_autoptr(GArray) options = g_array_new(FALSE, FALSE, sizeof(CliOption));
    Daemon d = { .pidfile_fd = -1, .ready_fd = -1, .sigfd = -1 };
    Error *err = NULL;

    d.config_entries = g_ptr_array_new_with_free_func(
        daemon_config_entry_free);
    daemon_collect_options(argc, argv, &d, options);
    /* Before the fork: LISTEN_PID names this process, not the child. */
    if (!listen_fds_init(&err)) {
        error_report("%s", error_get_pretty(err));
        exit(1);
    }
    if (d.daemonize) {
        daemon_fork(&d);
    }
    daemon_setup_signals(&d);

    d.ctx = aio_context_new(&err);
    if (!d.ctx) {
        error_report("%s", error_get_pretty(err));
        exit(1);
    }
    d.chardevs = g_ptr_array_new_with_free_func(chardev_conf_free);
    d.monitors = g_ptr_array_new();
    aio_set_fd_handler(d.ctx, d.sigfd, daemon_signal_read, NULL, NULL, NULL,
                       &d);
    aio_set_fd_handler_name(d.ctx, d.sigfd, "signals");
    main_loop_set_context(d.ctx);
    qmp_set_quit_handler(daemon_qmp_quit, &d);
    qmp_register_all_commands();

    for (guint i = 0; i < options->len; i++) {
        const CliOption *o = &g_array_index(options, CliOption, i);
        g_autofree char *name = o->label ?
            g_strconcat("--config ", o->label, NULL) :
            g_strconcat("--", o->name, NULL);

        if (!daemon_process_option(&d, o, &err)) {
            daemon_fail(&d, name, err);
        }
    }
    daemon_warn_unused_fds();
    daemon_wait_for_monitors(&d);
    if (d.quit) {
        /* Stopped before it started: no pid file. */
        daemon_notify_stopping();
        daemon_emit_shutdown(&d);
        daemon_teardown(&d);
        return 0;
    }
    if (d.pidfile && !daemon_write_pidfile(&d, &err)) {
        daemon_fail(&d, "--pidfile", err);
    }
    if (d.daemonize) {
        daemon_detach(&d);
    }
    daemon_notify_started(&d);

    while (!d.quit) {
        aio_poll(d.ctx, true);
    }

    daemon_notify_stopping();
    daemon_emit_shutdown(&d);
    daemon_print_iothread_stats();
    daemon_teardown(&d);
    return 0;
}
