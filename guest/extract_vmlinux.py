#!/usr/bin/env python3
"""Extract the uncompressed ELF kernel (vmlinux) from an x86 bzImage (vmlinuz).

A bzImage is real-mode setup sectors followed by the 32/64-bit decompressor, which carries the compressed kernel
as its payload. Boot protocol 2.08+ records where: the setup header's payload_offset (0x248) and payload_length
(0x24c), counted from the start of the protected-mode code, which begins after (setup_sects + 1) * 512 bytes
(setup_sects at 0x1f1; 0 means 4). This reads those fields, decompresses the payload (xz or gzip, the formats the
Python standard library has) and checks that the result is an ELF file.

QEMU boots the ELF directly through its PVH entry point (the kernel needs CONFIG_PVH), skipping the decompressor.

usage: extract_vmlinux.py VMLINUZ OUT
"""

import gzip
import lzma
import os
import struct
import sys


class ExtractError(Exception):
    pass


def payload(image):
    if len(image) < 0x250 or image[0x202:0x206] != b"HdrS":
        raise ExtractError("no bzImage setup header ('HdrS' at 0x202)")
    version = struct.unpack_from("<H", image, 0x206)[0]
    if version < 0x208:
        raise ExtractError(f"boot protocol {version >> 8}.{version & 0xff:02} has no payload fields (need 2.08+)")
    setup_sects = image[0x1F1] or 4
    offset, length = struct.unpack_from("<II", image, 0x248)
    start = (setup_sects + 1) * 512 + offset
    if length == 0 or start + length > len(image):
        raise ExtractError(f"payload at 0x{start:x}+0x{length:x} lies outside the {len(image)}-byte image")
    return image[start:start + length]


def decompress(data):
    if data.startswith(b"\xfd7zXZ\x00"):
        d = lzma.LZMADecompressor(format=lzma.FORMAT_XZ)
        return d.decompress(data)  # stops at the end of the stream; the kernel appends a 4-byte size after it
    if data.startswith(b"\x1f\x8b"):
        d = gzip.zlib.decompressobj(16 + gzip.zlib.MAX_WBITS)
        return d.decompress(data)
    raise ExtractError(f"unsupported payload compression (magic {data[:6].hex()}); xz and gzip are supported")


def extract(image):
    out = decompress(payload(image))
    if not out.startswith(b"\x7fELF"):
        raise ExtractError("decompressed payload is not an ELF file")
    return out


def main(argv):
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    src, dst = argv
    try:
        with open(src, "rb") as f:
            elf = extract(f.read())
    except (OSError, ExtractError, lzma.LZMAError, gzip.zlib.error) as e:
        print(f"extract_vmlinux: {src}: {e}", file=sys.stderr)
        return 1
    tmp = dst + ".tmp"
    with open(tmp, "wb") as f:
        f.write(elf)
    os.replace(tmp, dst)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
