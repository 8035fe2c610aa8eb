"""Build a tiny initramfs for end-to-end guests: busybox, virtio modules, /init.

The guest a test boots is a Debian kernel (linux-image-amd64, /boot/vmlinuz-*)
with an initramfs made here from two gzip-compressed cpio archives laid one
after the other, which the kernel unpacks in order:

  base    /bin/busybox (from busybox-static) and the kernel modules the guest
          needs for its disks, in the order `modprobe -a --show-depends`
          gives them, listed in /modules.order; cached per kernel version
          (and busybox build), because it never changes between tests;
  extra   the test's /init script and any data files it needs (a write
          pattern, for example); small, built for each boot.

The archives are written by this module in the "newc" cpio format, so no
cpio binary and no root are needed (device nodes are just header entries).
Compressed modules (.ko.xz, .ko.zst, .ko.gz) are stored uncompressed, which
busybox's insmod loads on any kernel.

Only Python's standard library is used.  The host needs the kernel image,
its /lib/modules/VERSION tree and modprobe (kmod), which is where the
dependency order comes from.
"""

import gzip
import hashlib
import io
import lzma
import os
import re
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

# Modules for virtio-blk and virtio-scsi disks.
GUEST_MODULES = ("virtio_pci", "virtio_blk", "virtio_scsi", "sd_mod")

BUSYBOX_CANDIDATES = ("/bin/busybox", "/usr/bin/busybox")

# Bumped when the layout of the base archive changes, so old caches are ignored.
BASE_FORMAT = 1


class InitramfsError(RuntimeError):
    """The host lacks something the initramfs needs; the message says what."""


# --- what the host has ---------------------------------------------------------

def find_kernel(kernel=None):
    """Return (path of vmlinuz, kernel version) for the guest kernel.

    `kernel` may name a vmlinuz file; otherwise the newest /boot/vmlinuz-*
    whose /lib/modules/VERSION exists is chosen.  Raises InitramfsError if
    there is none.
    """
    if kernel:
        path = Path(kernel)
        version = path.name.split("vmlinuz-", 1)[-1]
        if not path.is_file():
            raise InitramfsError(f"kernel {path} does not exist")
        return path, version
    found = []
    for path in Path("/boot").glob("vmlinuz-*"):
        version = path.name[len("vmlinuz-"):]
        if (Path("/lib/modules") / version).is_dir() and os.access(path, os.R_OK):
            found.append((_version_key(version), path, version))
    if not found:
        raise InitramfsError(
            "no readable /boot/vmlinuz-VERSION with /lib/modules/VERSION: "
            "install linux-image-amd64 (scripts/install-deps.sh does)")
    found.sort()
    return found[-1][1], found[-1][2]


def _version_key(version):
    return [int(p) if p.isdigit() else p for p in re.split(r"[.\-+~]", version)]


def find_busybox():
    """Return the path of a statically linked busybox, or raise InitramfsError."""
    for candidate in BUSYBOX_CANDIDATES:
        path = Path(candidate)
        if path.is_file() and _is_static(path):
            return path
    raise InitramfsError("no statically linked busybox: install busybox-static "
                         "(scripts/install-deps.sh does)")


def _is_static(path):
    """True if the ELF file at `path` has no program interpreter (PT_INTERP)."""
    with open(path, "rb") as f:
        data = f.read(4096)
    if data[:4] != b"\x7fELF" or data[4] != 2:      # 64-bit ELF only
        return False
    little = data[5] == 1
    order = "little" if little else "big"
    phoff = int.from_bytes(data[0x20:0x28], order)
    phentsize = int.from_bytes(data[0x36:0x38], order)
    phnum = int.from_bytes(data[0x38:0x3a], order)
    for i in range(phnum):
        off = phoff + i * phentsize
        if off + 4 > len(data):
            break
        if int.from_bytes(data[off:off + 4], order) == 3:   # PT_INTERP
            return False
    return True


def module_load_order(version, modules=GUEST_MODULES):
    """Return the .ko paths to insmod, dependencies first, without repeats.

    Asks `modprobe -a --show-depends -S VERSION`.  Modules built into the
    kernel show up as "builtin NAME" and need no file, so they are left out;
    an empty list means everything is built in.
    """
    modprobe = shutil.which("modprobe") or "/sbin/modprobe"
    if not os.access(modprobe, os.X_OK):
        raise InitramfsError("modprobe not found: install kmod")
    cmd = [modprobe, "-a", "--show-depends", "-S", version, *modules]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise InitramfsError(f"{' '.join(cmd)} failed: {proc.stderr.strip()}")
    order = []
    for line in proc.stdout.splitlines():
        words = line.split()
        if len(words) >= 2 and words[0] == "insmod":
            path = Path(words[1])
            if path not in order:
                order.append(path)
    return order


def _module_bytes(path):
    """The module's ELF bytes, decompressed if the file is compressed."""
    name = path.name
    if name.endswith(".ko"):
        return path.read_bytes()
    if name.endswith(".ko.xz"):
        return lzma.decompress(path.read_bytes())
    if name.endswith(".ko.gz"):
        return gzip.decompress(path.read_bytes())
    if name.endswith(".ko.zst"):
        zstd = shutil.which("zstd")
        if not zstd:
            raise InitramfsError(f"{path} is zstd-compressed: install zstd")
        return subprocess.run([zstd, "-dc", str(path)], check=True,
                              capture_output=True).stdout
    raise InitramfsError(f"unknown kernel module format: {path}")


def _module_name(path):
    return path.name.split(".ko", 1)[0]


# --- newc cpio writer -------------------------------------------------------------

class CpioWriter:
    """Writes a "newc" (070701) cpio archive to a binary stream."""

    def __init__(self, out):
        self._out = out
        self._ino = 1
        self._dirs = set()

    def _entry(self, name, mode, data=b"", rdev=(0, 0), nlink=1):
        name_bytes = name.encode() + b"\0"
        fields = (self._ino, mode, 0, 0, nlink, 0, len(data), 0, 0,
                  rdev[0], rdev[1], len(name_bytes), 0)
        self._ino += 1
        header = b"070701" + b"".join(b"%08X" % f for f in fields)
        self._out.write(header + name_bytes)
        self._pad(len(header) + len(name_bytes))
        self._out.write(data)
        self._pad(len(data))

    def _pad(self, n):
        self._out.write(b"\0" * (-n % 4))

    def directory(self, name, mode=0o755):
        name = name.strip("/")
        if not name or name in self._dirs:
            return
        parent = os.path.dirname(name)
        if parent:
            self.directory(parent)
        self._dirs.add(name)
        self._entry(name, stat.S_IFDIR | mode, nlink=2)

    def file(self, name, data, mode=0o644):
        name = name.strip("/")
        self.directory(os.path.dirname(name))
        self._entry(name, stat.S_IFREG | mode, data)

    def symlink(self, name, target):
        name = name.strip("/")
        self.directory(os.path.dirname(name))
        self._entry(name, stat.S_IFLNK | 0o777, target.encode())

    def chardev(self, name, major, minor, mode=0o600):
        name = name.strip("/")
        self.directory(os.path.dirname(name))
        self._entry(name, stat.S_IFCHR | mode, rdev=(major, minor))

    def close(self):
        self._entry("TRAILER!!!", 0)


def _write_gzip_cpio(path, fill):
    """Write a gzip-compressed newc archive to `path` atomically; fill(writer)."""
    buf = io.BytesIO()
    writer = CpioWriter(buf)
    fill(writer)
    writer.close()
    tmp = Path(str(path) + f".tmp{os.getpid()}")
    with open(tmp, "wb") as raw:
        # mtime=0: the same inputs give the same bytes.
        with gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6, mtime=0) as gz:
            gz.write(buf.getvalue())
    os.replace(tmp, path)


# --- the two archives ----------------------------------------------------------

def build_base(cache_dir, kernel_version, busybox=None, modules=GUEST_MODULES):
    """Return the path of the cached base archive, building it if needed.

    The file name carries the kernel version and a hash of busybox and the
    module list, so a new kernel or busybox gets a new archive.
    """
    busybox = Path(busybox) if busybox else find_busybox()
    ko_paths = module_load_order(kernel_version, modules)
    digest = hashlib.sha256()
    digest.update(b"format %d\n" % BASE_FORMAT)
    digest.update(busybox.read_bytes())
    for ko in ko_paths:
        st = ko.stat()
        digest.update(f"{ko} {st.st_size} {st.st_mtime_ns}\n".encode())
    cache_dir = Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    path = cache_dir / f"base-{kernel_version}-{digest.hexdigest()[:16]}.cpio.gz"
    if path.is_file():
        return path

    def fill(w):
        for d in ("bin", "sbin", "dev", "proc", "sys", "tmp", "mnt", "modules"):
            w.directory(d)
        # The kernel opens /dev/console for init's stdio before init runs.
        w.chardev("dev/console", 5, 1)
        w.chardev("dev/null", 1, 3, mode=0o666)
        w.file("bin/busybox", busybox.read_bytes(), mode=0o755)
        w.symlink("bin/sh", "busybox")
        order = []
        for ko in ko_paths:
            name = _module_name(ko) + ".ko"
            w.file("modules/" + name, _module_bytes(ko))
            order.append(name)
        w.file("modules.order", ("".join(n + "\n" for n in order)).encode())

    _write_gzip_cpio(path, fill)
    return path


# Runs first in every guest: mounts, device nodes, modules.  The test's own
# script follows it in the same /init.
INIT_PROLOGUE = r"""#!/bin/sh
/bin/busybox --install -s /bin
export PATH=/bin:/sbin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
mount -t tmpfs tmpfs /tmp
echo "SPINDLE-STAGE init"
while read -r ko; do
    name=$(echo "${ko%.ko}" | tr - _)
    # A module may be built in, or already loaded as another one's dependency.
    if [ -d "/sys/module/$name" ]; then continue; fi
    insmod "/modules/$ko" 2>/tmp/insmod.err ||
        echo "SPINDLE-WARN insmod $ko failed: $(cat /tmp/insmod.err)"
done < /modules.order
echo "SPINDLE-STAGE modules"
"""

INIT_EPILOGUE = r"""
echo "SPINDLE-STAGE done"
sync
poweroff -f
"""


def build_extra(path, script, files=None):
    """Write the per-boot archive: /init = prologue + script + poweroff.

    `files` maps guest paths ("/pattern.bin") to bytes.
    """
    init = INIT_PROLOGUE + script + INIT_EPILOGUE

    def fill(w):
        w.file("init", init.encode(), mode=0o755)
        for name, data in (files or {}).items():
            w.file(name, data)

    _write_gzip_cpio(path, fill)
    return path


def build_initramfs(cache_dir, script, files=None, kernel_version=None,
                    out_dir=None):
    """Return the path of an initramfs whose /init runs `script`.

    The base archive is cached in `cache_dir` by kernel version; the result
    (base + extra, concatenated) is written to `out_dir` (default: a new
    temporary directory under cache_dir) and the caller may delete it.
    """
    if kernel_version is None:
        kernel_version = find_kernel()[1]
    base = build_base(cache_dir, kernel_version)
    out_dir = Path(out_dir) if out_dir else Path(
        tempfile.mkdtemp(prefix="boot-", dir=cache_dir))
    extra = build_extra(out_dir / "extra.cpio.gz", script, files)
    result = out_dir / "initramfs.cpio.gz"
    with open(result, "wb") as out:
        for part in (base, extra):
            with open(part, "rb") as f:
                shutil.copyfileobj(f, out)
    extra.unlink()
    return result
