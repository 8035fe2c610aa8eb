"""The raw image of --backend file: written in full before the first run.

A sparse or freshly allocated file reads back without touching the disk
(holes, unwritten extents), so every block is written first, with data that
differs from block to block (a device that compresses or deduplicates would
otherwise make reads of repeated blocks cheaper than real ones), and synced.
The file must take O_DIRECT: both daemons open it with cache.direct=on.
"""

import os
import tempfile
from pathlib import Path

CHUNK = 1 << 20


class ImageError(RuntimeError):
    """The image cannot be made where it was asked for; the message says why."""


def create(directory, size_bytes, say=print):
    """A preconditioned image of size_bytes in directory; returns its Path."""
    directory = Path(directory)
    if not directory.is_dir():
        raise ImageError(f"--dir {directory}: not a directory")
    if size_bytes % CHUNK:
        raise ImageError(f"--disk-size must be a whole number of MiB for an image "
                         f"(got {size_bytes} bytes)")
    free = os.statvfs(directory)
    if free.f_bavail * free.f_frsize < size_bytes + (64 << 20):
        raise ImageError(f"--dir {directory}: {size_bytes >> 20} MiB do not fit "
                         f"({free.f_bavail * free.f_frsize >> 20} MiB free)")
    fd, name = tempfile.mkstemp(prefix="bench-compare-", suffix=".img", dir=directory)
    path = Path(name)
    try:
        say(f"== image: writing {size_bytes >> 20} MiB to {path}")
        base = bytearray(os.urandom(CHUNK))
        for i in range(size_bytes // CHUNK):
            # Every 4 KiB block of every chunk differs from every other.
            for off in range(0, CHUNK, 4096):
                base[off:off + 8] = (i * CHUNK + off).to_bytes(8, "little")
            os.write(fd, base)
        os.fsync(fd)
    except OSError as e:
        os.close(fd)
        path.unlink(missing_ok=True)
        raise ImageError(f"writing {path}: {e}") from e
    os.close(fd)
    try:
        os.close(os.open(path, os.O_RDONLY | os.O_DIRECT))
    except OSError as e:
        path.unlink(missing_ok=True)
        raise ImageError(f"{directory} does not take O_DIRECT ({e}); both daemons "
                         "open the image with cache.direct=on: choose another --dir "
                         "(not a tmpfs)") from e
    return path


def describe(path):
    """What the image sits on: {"dir", "fs", "device"} (for the report)."""
    path = Path(path).resolve()
    best = None
    try:
        with open("/proc/self/mounts") as f:
            for line in f:
                dev, mnt, fs = line.split()[:3]
                if str(path).startswith(mnt.rstrip("/") + "/") or str(path) == mnt:
                    if best is None or len(mnt) > len(best[1]):
                        best = (dev, mnt, fs)
    except OSError:
        pass
    return {"dir": str(path.parent), "fs": best[2] if best else None,
            "device": best[0] if best else None}
