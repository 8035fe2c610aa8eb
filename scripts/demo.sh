#!/usr/bin/env bash
#
# Spindle demo: a Linux guest in QEMU does verified I/O on a disk Spindle serves.
#
#   1. installs what is missing (scripts/install-deps.sh: build tools, QEMU,
#      a Debian kernel, busybox-static);
#   2. builds Spindle (make);
#   3. creates a sparse scratch image in a temporary directory;
#   4. starts spindle with one IOThread and a vhost-user-blk export of it;
#   5. boots Debian's kernel in Debian's QEMU (TCG, no KVM needed) with a
#      vhost-user-blk-pci disk on spindle's socket; the guest's init writes a
#      known pattern with O_DIRECT, reads it back and compares, then powers off
#      (tests/e2e/boot_guest.py builds the initramfs and runs the guest);
#   6. checks the image file on the host, prints the guest's result, the
#      IOThread's CPU time and the polling statistics spindle prints when it
#      exits, and shuts everything down.
#
# It takes about 10 s once the packages are installed and the tree is built
# (about 25 s with a build from scratch; installing the packages the first
# time takes a minute or two more).
#
# Environment:
#   DEMO_QUEUES=N        num-queues of the disk (default 2; the guest gets as
#                        many vCPUs, up to 4)
#   DEMO_SIZE=SIZE       image size (default 256M)
#   DEMO_POLL_MAX_NS=N   the IOThread's poll-max-ns (default: spindle's, 32768)
#   DEMO_KEEP=1          keep the scratch directory (image, console log, logs)
#   DEMO_DAEMON=PATH     serve the disk with another program that takes the
#                        same command line, e.g. qemu-storage-daemon, for a
#                        side-by-side look (its output is labelled as such)
#   DEMO_SKIP_DEPS=1     do not run scripts/install-deps.sh
#   PYTHON               Python to use (default python3)

set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
PYTHON=${PYTHON:-python3}
QUEUES=${DEMO_QUEUES:-2}
SIZE=${DEMO_SIZE:-256M}
BUILD=${BUILD:-build}

START=$(date +%s.%N)
DAEMON_PID=
SCRATCH=

say() { printf '\n== %s\n' "$*"; }
elapsed() { awk -v s="$START" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }'; }
die() { echo "demo: error: $*" >&2; exit 1; }

cleanup() {
    local rc=$?
    if [[ -n $DAEMON_PID ]] && kill -0 "$DAEMON_PID" 2>/dev/null; then
        kill -TERM "$DAEMON_PID" 2>/dev/null || true
        wait "$DAEMON_PID" 2>/dev/null || true
    fi
    if [[ -n $SCRATCH && -d $SCRATCH ]]; then
        if [[ ${DEMO_KEEP:-} == 1 || $rc -ne 0 ]]; then
            echo "demo: scratch directory kept: $SCRATCH"
        else
            rm -rf "$SCRATCH"
        fi
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# On-CPU time of each thread of a process, as "name microseconds" lines: from
# /proc/PID/task/TID/schedstat (nanoseconds), else utime+stime in clock ticks.
thread_cpu() {
    local pid=$1 tck task comm ns stat fields
    tck=$(getconf CLK_TCK)
    for task in /proc/"$pid"/task/*; do
        comm=$(cat "$task/comm" 2>/dev/null) || continue
        if read -r ns _ <"$task/schedstat" 2>/dev/null; then
            echo "$comm $(( ns / 1000 ))"
        else
            stat=$(cat "$task/stat" 2>/dev/null) || continue
            # After "(comm) " come the state (field 3), ... utime (14), stime (15).
            read -r -a fields <<<"${stat##*) }"
            echo "$comm $(( (fields[11] + fields[12]) * 1000000 / tck ))"
        fi
    done
}

# --- 1. dependencies -----------------------------------------------------------
if [[ ${DEMO_SKIP_DEPS:-} != 1 ]]; then
    say "1/6 dependencies (scripts/install-deps.sh)"
    PYTHON=$PYTHON bash scripts/install-deps.sh
fi

# --- 2. build ------------------------------------------------------------------------
say "2/6 build"
SCRATCH=$(mktemp -d /tmp/spindle-demo.XXXXXX)
if ! make BUILD="$BUILD" all >"$SCRATCH/build.log" 2>&1; then
    tail -30 "$SCRATCH/build.log" >&2
    die "the build failed (log: $SCRATCH/build.log)"
fi
echo "built $BUILD/ ($(elapsed) s so far)"

if [[ -n ${DEMO_DAEMON:-} ]]; then
    DAEMON=$(command -v "$DEMO_DAEMON") || die "DEMO_DAEMON=$DEMO_DAEMON not found"
    FLAVOUR=other
    echo "serving the disk with $DAEMON instead of spindle (DEMO_DAEMON)"
else
    DAEMON=$ROOT/$BUILD/daemon/spindle
    FLAVOUR=spindle
    [[ -x $DAEMON ]] || die "$DAEMON was not built"
    if ! "$DAEMON" --help 2>&1 | grep -q vhost-user-blk; then
        die "$DAEMON does not implement the vhost-user-blk daemon yet
    (to try the demo's guest side now: DEMO_DAEMON=qemu-storage-daemon make demo)"
    fi
fi
NAME=$(basename "$DAEMON")

# --- 3. scratch image -----------------------------------------------------------------
say "3/6 scratch image"
IMG=$SCRATCH/vda.img
SOCK=$SCRATCH/vda.sock
truncate -s "$SIZE" "$IMG"
SIZE_BYTES=$(stat -c %s "$IMG")
echo "$IMG: $SIZE (sparse)"

# --- 4. daemon ------------------------------------------------------------------------
say "4/6 start $NAME with IOThread iot0"
IOTHREAD="iothread,id=iot0"
[[ -n ${DEMO_POLL_MAX_NS:-} ]] && IOTHREAD+=",poll-max-ns=$DEMO_POLL_MAX_NS"
EXPORT="type=vhost-user-blk,id=exp0,node-name=disk0,addr.type=unix,addr.path=$SOCK"
EXPORT+=",writable=on,num-queues=$QUEUES,iothread=iot0"
SERIAL=
if [[ $FLAVOUR == spindle ]]; then
    SERIAL=spindle-demo
    EXPORT+=",serial=$SERIAL"
fi
CMD=("$DAEMON" --object "$IOTHREAD"
     --blockdev "driver=file,node-name=disk0,filename=$IMG"
     --export "$EXPORT")
echo "${CMD[*]}" | sed "s|$SCRATCH|\$SCRATCH|g"
"${CMD[@]}" </dev/null >"$SCRATCH/daemon.log" 2>&1 &
DAEMON_PID=$!
echo "$NAME pid $DAEMON_PID"

# --- 5. guest -----------------------------------------------------------------------
say "5/6 boot a guest on the disk (QEMU TCG, vhost-user-blk-pci, num-queues=$QUEUES)"
GUEST_ARGS=(--socket "$SOCK" --queues "$QUEUES" --size "$SIZE_BYTES" --image "$IMG"
            --console-log "$SCRATCH/console.log")
[[ -n $SERIAL ]] && GUEST_ARGS+=(--serial "$SERIAL")
guest_rc=0
"$PYTHON" tests/e2e/boot_guest.py "${GUEST_ARGS[@]}" || guest_rc=$?
if ! kill -0 "$DAEMON_PID" 2>/dev/null; then
    wait "$DAEMON_PID" || true
    cat "$SCRATCH/daemon.log" >&2
    DAEMON_PID=
    die "$NAME exited during the guest run"
fi

# --- 6. statistics and shutdown -----------------------------------------------------------
say "6/6 $NAME: IOThread statistics, then SIGTERM"
echo "CPU time of each thread of $NAME (/proc/$DAEMON_PID/task/*/schedstat):"
thread_cpu "$DAEMON_PID" | awk '{ printf "  %-16s %9.1f ms\n", $1, $2 / 1000 }'
kill -TERM "$DAEMON_PID"
daemon_rc=0
wait "$DAEMON_PID" || daemon_rc=$?
DAEMON_PID=
echo "$NAME exited with status $daemon_rc"
# The daemon prints one line per IOThread when it exits, e.g.
#   spindle: iothread iot0 stats: turns=... poll_hits=... poll_misses=... ...
if grep -E 'iothread .* stats: ' "$SCRATCH/daemon.log" >"$SCRATCH/stats.txt"; then
    echo "polling statistics ($NAME's own report at exit):"
    sed 's/^/  /' "$SCRATCH/stats.txt"
    # The same numbers in words (see docs/user-guide.md, "IOThreads and polling").
    awk '{
        delete v
        for (i = 1; i <= NF; i++) if (split($i, kv, "=") == 2) v[kv[1]] = kv[2]
        if (!("turns" in v)) next
        printf "  %s: %d loop turns; polling found work %d times, %d windows ended empty;\n",
               $3, v["turns"], v["poll_hits"], v["poll_misses"]
        printf "    %d sleeps ended by an event; spun %.2f ms, slept %.2f s",
               v["wakeups"], v["poll_time_ns"] / 1e6, v["block_time_ns"] / 1e9
        if ("cpu_ns" in v) printf "; CPU %.1f ms", v["cpu_ns"] / 1e6
        printf "\n"
    }' "$SCRATCH/stats.txt"
else
    echo "$NAME printed no IOThread polling statistics at exit."
fi
# ... and one per export and per queue:
#   spindle: export e0 queue 0 stats: iothread=iot0 requests=... kicks=... ...
if grep -E 'export .* stats: ' "$SCRATCH/daemon.log" >"$SCRATCH/export-stats.txt"; then
    echo "requests, kicks and interrupts per queue ($NAME's report at exit):"
    sed 's/^/  /' "$SCRATCH/export-stats.txt"
fi
if [[ -s $SCRATCH/daemon.log ]] && grep -vqE '(iothread|export) .* stats: ' "$SCRATCH/daemon.log"; then
    echo "$NAME's other output:"
    grep -vE '(iothread|export) .* stats: ' "$SCRATCH/daemon.log" | sed 's/^/  /' | tail -20
fi

say "done in $(elapsed) s"
if [[ $guest_rc -ne 0 ]]; then
    die "the guest's workload did not verify (console: $SCRATCH/console.log)"
fi
if [[ $daemon_rc -ne 0 ]]; then
    die "$NAME did not exit cleanly on SIGTERM (status $daemon_rc)"
fi
echo "demo: the guest's data was written, read back and verified, in the guest and in the image file"
