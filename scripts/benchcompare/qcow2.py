"""The images and cases of --backend qcow2.

Three cases, each a pair of both daemons (and an engine, aio= of the file
node, as with --backend file):

  raw    the preconditioned raw image of --backend file (image.py) through
         a file node: the reference for "allocated reads within 10% of
         raw", with --rw as given (default randread);
  qcow2  a qcow2 image holding the same data with every cluster allocated
         (`qemu-img convert -O qcow2` of the raw image), through a file node
         and a qcow2 node: allocated reads, --rw as given;
  alloc  a fresh copy of an empty qcow2 image of the same size for every
         run, --rw randwrite: allocating writes.  Both daemons are started
         again on a copy of their own before each run (two daemons writing
         one qcow2 image would corrupt it, and a run over clusters an
         earlier run allocated would measure overwrites).  The copies are
         removed after the pair's last run, so --dir needs room for
         2 x loads x repeats of them at --disk-size each (20 GiB by
         default), besides the raw and the converted image.

Both daemons get the same nodes:

    --blockdev driver=file,node-name=f0,filename=IMAGE,aio=ENGINE,cache.direct=on,locking=off
    --blockdev driver=qcow2,node-name=n0,file=f0

(the raw case: the file node alone, as node n0).  The qcow2 images have
QEMU's default 64 KiB clusters; each node its drivers' default caches.
A random write allocates only the first time its cluster is hit, so each
alloc run reports how many clusters it allocated per write, from the
image's growth (`qcow2_clusters_per_write` in its result): 1 when every
write allocated, less as later writes land in clusters allocated before.
"""

import os
import shutil
import subprocess
from pathlib import Path

from .image import ImageError
from .matrix import CASES  # noqa: F401  (re-exported)

CLUSTER = 64 << 10


def _qemu_img(*args):
    qemu_img = shutil.which("qemu-img")
    if not qemu_img:
        raise ImageError("qemu-img is not installed (apt-get install qemu-utils)")
    proc = subprocess.run([qemu_img, *map(str, args)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise ImageError(f"qemu-img {' '.join(map(str, args))}: "
                         f"{(proc.stderr or proc.stdout).strip()}")
    return proc.stdout


class Images:
    """The qcow2 images beside the raw one (in the same directory)."""

    def __init__(self, raw, size_bytes, say=print):
        self.size = size_bytes
        self.raw = Path(raw)
        self.dir = self.raw.parent
        self.allocated = self.raw.with_suffix(".qcow2")
        self.empty = self.raw.with_suffix(".empty.qcow2")
        self.copies = 0
        say(f"== qcow2: converting {self.raw.name} to {self.allocated.name} "
            "(every cluster allocated)")
        _qemu_img("convert", "-f", "raw", "-O", "qcow2", self.raw, self.allocated)
        _qemu_img("create", "-f", "qcow2", self.empty, size_bytes)

    def fresh(self, tag):
        """A new copy of the empty image (the caller removes it).  A run may
        fill it, so there must be room for a full one."""
        free = os.statvfs(self.dir)
        if free.f_bavail * free.f_frsize < self.size + (64 << 20):
            raise ImageError(f"--dir {self.dir}: no room for another qcow2 image of "
                             f"up to {self.size >> 20} MiB (an alloc run may fill "
                             "it; the copies of a pair are removed after it)")
        self.copies += 1
        path = self.dir / f"{self.raw.stem}.{tag}.{self.copies}.qcow2"
        shutil.copyfile(self.empty, path)
        return path

    def image_of(self, case):
        return {"raw": self.raw, "qcow2": self.allocated}[case]

    def cleanup(self):
        for p in (self.allocated, self.empty):
            p.unlink(missing_ok=True)


def node_args(case, image, engine):
    """The --blockdev options of the case, the top node named n0."""
    if case == "raw":
        return [f"driver=file,node-name=n0,filename={image},aio={engine},"
                "cache.direct=on,locking=off"]
    return [f"driver=file,node-name=f0,filename={image},aio={engine},"
            "cache.direct=on,locking=off",
            "driver=qcow2,node-name=n0,file=f0"]


def case_rw(case, rw):
    """What spindle-bench does in the case: randwrite for alloc."""
    return "randwrite" if case == "alloc" else rw


def clusters_per_write(image, size_before, ios):
    """Clusters an alloc run added to `image` (from its growth) per I/O."""
    try:
        grown = os.stat(image).st_size - size_before
    except OSError:
        return None
    return grown / CLUSTER / ios if ios else None
