#!/usr/bin/env bash
#
# Install what building and testing Spindle needs, on Debian 12.
#
# Safe to run again and again: it only looks when everything is already there
# (one dpkg-query per Debian package, one import per Python package) and only
# touches apt or pip for what is missing.  As root it installs; as anyone else
# it names what is missing and how to get it, and fails.
#
# Environment:
#   PYTHON   the Python that runs the functional tests (default: python3)

set -euo pipefail

export DEBIAN_FRONTEND=noninteractive
export PIP_ROOT_USER_ACTION=ignore
export PIP_DISABLE_PIP_VERSION_CHECK=1

PYTHON=${PYTHON:-python3}

# Debian packages: compiler and build tools, libraries, test runner's Python.
# scdoc turns docs/man/*.scd into manual pages; man-db's man renders them
# in tests/functional/test_man.py.
# clang builds the libFuzzer harnesses (make fuzz, make check-fuzz); its
# libFuzzer and sanitizer runtimes come with it.  libsystemd-dev: sd_notify
# and the sockets systemd passes (the libsystemd feature); zlib1g-dev and
# libzstd-dev: qcow2 compressed clusters (the zlib and zstd features); systemd:
# systemd.pc's unit directory and systemd-analyze, which checks the units.
APT_PACKAGES=(
    meson
    ninja-build
    pkg-config
    gcc
    clang
    libc6-dev
    libglib2.0-dev
    libjson-glib-dev
    libaio-dev
    liburing-dev
    libnbd-dev
    librbd-dev
    zlib1g-dev
    libzstd-dev
    systemtap-sdt-dev
    scdoc
    man-db
    libsystemd-dev
    systemd
    python3
    python3-pip
)

# For the end-to-end tests and `make demo` (tests/e2e/README.md): QEMU under
# TCG and qemu-storage-daemon (the peer), a Debian kernel and its modules for
# the guest, static busybox for the guest's initramfs, kmod for modprobe's
# module dependency list.  Installed without Recommends, which would pull in
# a GUI and firmware the tests never use.
GUEST_APT_PACKAGES=(
    qemu-system-x86
    qemu-system-common
    linux-image-amd64
    busybox-static
    kmod
)

# The NBD servers the nbd driver's tests start (tests/unit/test-nbd.c,
# tests/functional/test_nbd.py): nbdkit with its memory plugin and its
# filters, and qemu-nbd (qemu-utils) serving a file.
GUEST_APT_PACKAGES+=(
    nbdkit
    qemu-utils
)

# The single-node Ceph cluster the rbd driver's tests start
# (tests/functional/ceph_cluster.py): a monitor, an OSD, and the ceph,
# rbd and rados tools.
GUEST_APT_PACKAGES+=(
    ceph-mon
    ceph-osd
    ceph-common
)

# The libvirt test (tests/functional/test_e2e_libvirt.py, its libvirtd in
# tests/e2e/libvirtd.py): libvirtd with its QEMU driver, and virsh.  Not
# libvirt-daemon-system: the test starts a libvirtd of its own in session
# mode and needs no service, user or network the system one sets up.
GUEST_APT_PACKAGES+=(
    libvirt-daemon
    libvirt-daemon-driver-qemu
    libvirt-clients
)

# qemu-storage-daemon's rbd driver, a module of its own (block-rbd.so), for
# scripts/bench-compare --backend rbd, which runs it beside Spindle's.
GUEST_APT_PACKAGES+=(
    qemu-block-extra
)

# Python packages, as "pip name:module to import".
PIP_PACKAGES=(
    pytest:pytest
    qemu.qmp:qemu.qmp
    matplotlib:matplotlib
)

log() {
    echo "install-deps: $*"
}

die() {
    echo "install-deps: error: $*" >&2
    exit 1
}

is_root() {
    [[ $(id -u) -eq 0 ]]
}

# Print those of the named Debian packages that are not installed, one per line.
missing_apt_packages() {
    local pkg status
    for pkg in "$@"; do
        status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
        if [[ $status != "install ok installed" ]]; then
            echo "$pkg"
        fi
    done
}

# Print the pip names of the Python packages that cannot be imported.
missing_pip_packages() {
    local entry
    for entry in "${PIP_PACKAGES[@]}"; do
        if ! "$PYTHON" -c "import ${entry#*:}" >/dev/null 2>&1; then
            echo "${entry%%:*}"
        fi
    done
}

APT_UPDATED=
# install_apt_packages [--no-install-recommends] PACKAGE...
install_apt_packages() {
    log "installing Debian packages: $*"
    if [[ -z $APT_UPDATED ]]; then
        apt-get update -q
        APT_UPDATED=1
    fi
    apt-get install -y -q -o DPkg::Lock::Timeout=300 "$@"
}

# pip refuses to write into a distribution's Python (PEP 668) unless told
# --break-system-packages; a pyenv or virtualenv Python takes a plain install.
install_pip_packages() {
    local errfile rc=0
    "$PYTHON" -m pip --version >/dev/null 2>&1 ||
        die "$PYTHON has no pip; install python3-pip (or pip for that Python)"

    log "installing Python packages for $PYTHON: $*"
    errfile=$(mktemp)
    "$PYTHON" -m pip install --no-input -q "$@" 2>"$errfile" || rc=$?
    if [[ $rc -ne 0 ]] && grep -q externally-managed-environment "$errfile"; then
        log "$PYTHON is managed by the distribution; using --break-system-packages"
        rc=0
        "$PYTHON" -m pip install --no-input -q --break-system-packages "$@" \
            2>"$errfile" || rc=$?
    fi
    if [[ $rc -ne 0 ]]; then
        cat "$errfile" >&2
        rm -f "$errfile"
        die "pip could not install: $*"
    fi
    rm -f "$errfile"
}

# A newer QEMU for the one end-to-end test QEMU 7.2 cannot run: killing
# the back-end of a vhost-user-scsi-pci device (QEMU 8.2 learnt to
# reconnect it).  Debian 12's bookworm-backports has one; it is unpacked
# (never installed: the guests keep Debian's QEMU) into
# $SPINDLE_QEMU_BACKPORTS.  Best effort: without it that test is skipped
# and says why.
QEMU_BACKPORTS_DIR=${SPINDLE_QEMU_BACKPORTS:-/var/cache/spindle/qemu-backports}
QEMU_BACKPORTS_DEBS=(qemu-system-x86 qemu-system-common qemu-system-data)

fetch_backports_qemu() {
    local qemu=$QEMU_BACKPORTS_DIR/usr/bin/qemu-system-x86_64 tmp deb
    local -a apt_opts

    [[ -x $qemu ]] && return 0
    grep -qs '^VERSION_CODENAME=bookworm$' /etc/os-release || return 0
    is_root || return 0
    log "unpacking QEMU from bookworm-backports into $QEMU_BACKPORTS_DIR"
    tmp=$(mktemp -d)
    mkdir -p "$tmp/lists/partial" "$tmp/debs"
    echo "deb http://deb.debian.org/debian bookworm-backports main" \
        >"$tmp/sources.list"
    apt_opts=(-q -o APT::Sandbox::User=root
              -o "Dir::Etc::sourcelist=$tmp/sources.list"
              -o "Dir::Etc::sourceparts=-" -o "Dir::State::Lists=$tmp/lists")
    if apt-get "${apt_opts[@]}" update >/dev/null &&
       (cd "$tmp/debs" && apt-get "${apt_opts[@]}" download \
            "${QEMU_BACKPORTS_DEBS[@]/%//bookworm-backports}" >/dev/null 2>&1); then
        mkdir -p "$QEMU_BACKPORTS_DIR"
        for deb in "$tmp"/debs/*.deb; do
            dpkg -x "$deb" "$QEMU_BACKPORTS_DIR"
        done
    fi
    rm -rf "$tmp"
    if [[ ! -x $qemu ]] || ! "$qemu" --version >/dev/null 2>&1; then
        log "warning: no QEMU from bookworm-backports; the vhost-user-scsi crash test will be skipped"
        rm -rf "$QEMU_BACKPORTS_DIR"
    fi
    return 0
}

main() {
    local -a apt_missing guest_missing pip_missing

    mapfile -t apt_missing < <(missing_apt_packages "${APT_PACKAGES[@]}")
    if [[ ${#apt_missing[@]} -gt 0 ]]; then
        is_root || die "missing Debian packages: ${apt_missing[*]}
    install them as root with:  apt-get install ${apt_missing[*]}"
        install_apt_packages "${apt_missing[@]}"
    fi

    mapfile -t guest_missing < <(missing_apt_packages "${GUEST_APT_PACKAGES[@]}")
    if [[ ${#guest_missing[@]} -gt 0 ]]; then
        is_root || die "missing Debian packages for guest tests: ${guest_missing[*]}
    install them as root with:  apt-get install --no-install-recommends ${guest_missing[*]}"
        install_apt_packages --no-install-recommends "${guest_missing[@]}"
    fi

    fetch_backports_qemu

    # Checked after apt, which may just have provided python3 and pip.
    command -v "$PYTHON" >/dev/null 2>&1 || die "$PYTHON not found"
    mapfile -t pip_missing < <(missing_pip_packages)
    if [[ ${#pip_missing[@]} -gt 0 ]]; then
        is_root || die "missing Python packages for $PYTHON: ${pip_missing[*]}
    install them with:  $PYTHON -m pip install ${pip_missing[*]}"
        install_pip_packages "${pip_missing[@]}"
        mapfile -t pip_missing < <(missing_pip_packages)
        [[ ${#pip_missing[@]} -eq 0 ]] ||
            die "still cannot import after installing: ${pip_missing[*]}"
    fi

    log "all $(( ${#APT_PACKAGES[@]} + ${#GUEST_APT_PACKAGES[@]} )) Debian and ${#PIP_PACKAGES[@]} Python packages are present"
}

main "$@"
