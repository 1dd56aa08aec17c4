#!/usr/bin/env python3
"""Write a Linux initramfs archive (cpio "newc" format) from a small spec, reproducibly.

Every entry gets uid 0, gid 0 and mtime 0, inode numbers follow the spec order, so the same inputs always give the
same bytes, and device nodes need no root. Spec lines (blank lines and '#' comments ignored):

    dir   /dev                 0755
    file  /bin/busybox  SRC    0755
    slink /bin/sh       busybox 0777
    nod   /dev/console  0600 c 5 1

Parent directories must be listed before their entries (the kernel creates entries in archive order).

usage: mkcpio.py SPEC OUT [--gzip]
"""

import argparse
import gzip
import io
import os
import stat
import sys

MAGIC = b"070701"


def _header(ino, mode, nlink, size, name, rdev=(0, 0)):
    name_b = name.encode() + b"\0"
    fields = [ino, mode, 0, 0, nlink, 0, size, 0, 0, rdev[0], rdev[1], len(name_b), 0]
    hdr = MAGIC + b"".join(b"%08X" % f for f in fields) + name_b
    return hdr + b"\0" * (-len(hdr) % 4)


def build(entries):
    """entries: list of (kind, path, args...) tuples. Returns the archive bytes."""
    out = io.BytesIO()
    for ino, entry in enumerate(entries, start=1):
        kind, path = entry[0], entry[1].lstrip("/")
        if not path:
            raise ValueError("empty path in spec")
        if kind == "dir":
            out.write(_header(ino, stat.S_IFDIR | int(entry[2], 8), 2, 0, path))
        elif kind == "file":
            with open(entry[2], "rb") as f:
                data = f.read()
            out.write(_header(ino, stat.S_IFREG | int(entry[3], 8), 1, len(data), path))
            out.write(data + b"\0" * (-len(data) % 4))
        elif kind == "slink":
            target = entry[2].encode()
            out.write(_header(ino, stat.S_IFLNK | int(entry[3], 8), 1, len(target), path))
            out.write(target + b"\0" * (-len(target) % 4))
        elif kind == "nod":
            mode, typ, major, minor = int(entry[2], 8), entry[3], int(entry[4]), int(entry[5])
            fmt = {"c": stat.S_IFCHR, "b": stat.S_IFBLK}[typ]
            out.write(_header(ino, fmt | mode, 1, 0, path, (major, minor)))
        else:
            raise ValueError(f"unknown spec kind {kind!r}")
    out.write(_header(0, 0, 1, 0, "TRAILER!!!"))
    return out.getvalue()


def parse_spec(text):
    arity = {"dir": 3, "file": 4, "slink": 4, "nod": 6}
    entries = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        if words[0] not in arity or len(words) != arity[words[0]]:
            raise ValueError(f"spec line {lineno}: expected {arity.get(words[0], '?')} words: {line!r}")
        entries.append(tuple(words))
    return entries


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("spec")
    ap.add_argument("out")
    ap.add_argument("--gzip", action="store_true", help="gzip the archive (mtime 0, reproducible)")
    a = ap.parse_args(argv)
    with open(a.spec) as f:
        data = build(parse_spec(f.read()))
    if a.gzip:
        data = gzip.compress(data, compresslevel=6, mtime=0)
    tmp = a.out + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
