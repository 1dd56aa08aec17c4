#!/usr/bin/env python3
"""Independent generator of Xen save-stream test vectors.

Written from Xen's written formats (docs/specs/libxc-migration-stream.pandoc rev 3,
docs/specs/libxl-migration-stream.pandoc rev 2, tools/xl/xl.h) and shares no code with the C++ codec, so the
two can check each other. For every vector it writes the stream and, for valid ones, NAME.expect: the events a
reader must report, one per line (format in test-vectors/README.md). MANIFEST lists every vector with the
expected outcome.

    xen_gen_vectors.py OUTDIR          write all vectors into OUTDIR
"""

import os
import struct
import sys

PAGE = 4096

# ---- constants from the specs ----
XL_MAGIC = b"Xen saved domain, xl format\n \0 \r"
assert len(XL_MAGIC) == 32
LIBXL_IDENT = 0x4C6962786C466D74
LIBXC_MARKER = 0xFFFFFFFFFFFFFFFF
LIBXC_ID = 0x58454E46

LIBXL_NAMES = {0: "END", 1: "LIBXC_CONTEXT", 2: "EMULATOR_XENSTORE_DATA", 3: "EMULATOR_CONTEXT",
               4: "CHECKPOINT_END", 5: "CHECKPOINT_STATE"}
LIBXC_NAMES = {0x00: "END", 0x01: "PAGE_DATA", 0x02: "X86_PV_INFO", 0x03: "X86_PV_P2M_FRAMES",
               0x04: "X86_PV_VCPU_BASIC", 0x05: "X86_PV_VCPU_EXTENDED", 0x06: "X86_PV_VCPU_XSAVE",
               0x07: "SHARED_INFO", 0x08: "X86_TSC_INFO", 0x09: "HVM_CONTEXT", 0x0A: "HVM_PARAMS",
               0x0B: "TOOLSTACK", 0x0C: "X86_PV_VCPU_MSRS", 0x0D: "VERIFY", 0x0E: "CHECKPOINT",
               0x0F: "CHECKPOINT_DIRTY_PFN_LIST", 0x10: "STATIC_DATA_END", 0x11: "X86_CPUID_POLICY",
               0x12: "X86_MSR_POLICY"}
END, PAGE_DATA, TSC_INFO, HVM_CONTEXT, HVM_PARAMS = 0x00, 0x01, 0x08, 0x09, 0x0A
VERIFY, CHECKPOINT, STATIC_DATA_END, CPUID_POLICY, MSR_POLICY = 0x0D, 0x0E, 0x10, 0x11, 0x12
L_END, L_LIBXC, L_XENSTORE, L_EMU = 0, 1, 2, 3
NOTAB, XALLOC, XTAB = 0x0, 0xE, 0xF


def type_name(names, t):
    if t in names:
        return names[t]
    return ("UNKNOWN_OPTIONAL 0x%x" if t & 0x80000000 else "UNKNOWN 0x%x") % t


def fnv1a64(data):
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return "%016x" % h


def page_bytes(pfn, generation=0):
    """Deterministic page content; pfn 2 is all zeros, as guests have many."""
    if pfn == 2 and generation == 0:
        return bytes(PAGE)
    seed = (pfn * 131 + generation * 17) & 0xFF
    return bytes((seed + i * 7 + (i >> 8)) & 0xFF for i in range(PAGE))


def has_data(ptype):
    return ptype not in (0x5, 0x6, 0x7, 0x8) and (ptype & 0x7) <= 0x4


class Stream:
    """Appends framed headers and records and keeps the expected reader events alongside."""

    def __init__(self):
        self.buf = bytearray()
        self.events = []
        self.marks = {}  # label -> (where-string, offset of record header, body length)
        self.libxl_index = 0
        self.libxc_index = 0
        self.batches = 0
        self.libxc_version = 3
        self.seen_sde = False

    def off(self):
        return len(self.buf)

    def xl_header(self, config, mandatory=0x3, optional_flags=0, tail=b"", byteorder=0x01020304,
                  magic=XL_MAGIC):
        optional = b"" if config is None else struct.pack("<I", len(config)) + config + tail
        self.buf += magic + struct.pack("<IIII", byteorder, mandatory, optional_flags, len(optional)) + optional
        if config is None:
            self.events.append("xl mandatory=0x%x optional=0x%x no-config" % (mandatory, optional_flags))
        else:
            self.events.append("xl mandatory=0x%x optional=0x%x config=%d fnv=%s tail=%d"
                               % (mandatory, optional_flags, len(config), fnv1a64(config), len(tail)))

    def libxl_header(self, options=0, version=2):
        self.buf += struct.pack(">QII", LIBXL_IDENT, version, options)
        self.events.append("libxl-header options=0x%x" % options)

    def _record(self, rtype, body, pad_byte=0):
        start = self.off()
        pad = (-len(body)) % 8
        self.buf += struct.pack("<II", rtype, len(body)) + body + bytes([pad_byte] * pad)
        return start

    def libxl_record(self, rtype, body=b"", label=None):
        start = self._record(rtype, body)
        where = "libxl record %d (%s) at offset 0x%x" % (self.libxl_index, type_name(LIBXL_NAMES, rtype), start)
        if label:
            self.marks[label] = (where, start, len(body))
        self.events.append("libxl-record index=%d offset=0x%x type=%s length=%d fnv=%s"
                           % (self.libxl_index, start, type_name(LIBXL_NAMES, rtype), len(body), fnv1a64(body)))
        self.libxl_index += 1
        return start

    def libxc_headers(self, version=3, options=0, dtype=2, page_shift=12, major=4, minor=17):
        start = self.off()
        self.libxc_version = version
        self.buf += struct.pack(">QIIHHI", LIBXC_MARKER, LIBXC_ID, version, options, 0, 0)
        self.buf += struct.pack("<IHHII", dtype, page_shift, 0, major, minor)
        self.marks["libxc-headers"] = ("libxc image header at offset 0x%x" % start, start, 24)
        self.marks["libxc-domain-header"] = ("libxc domain header at offset 0x%x" % (start + 24), start + 24, 16)
        self.events.append("libxc-headers offset=0x%x version=%d options=0x%x domain=%d page_shift=%d xen=%d.%d"
                           % (start, version, options, dtype, page_shift, major, minor))

    def libxc_record(self, rtype, body=b"", label=None, pad_byte=0):
        start = self._record(rtype, body, pad_byte)
        where = "libxc record %d (%s) at offset 0x%x" % (self.libxc_index, type_name(LIBXC_NAMES, rtype), start)
        if label:
            self.marks[label] = (where, start, len(body))
        if rtype == STATIC_DATA_END:
            self.seen_sde = True
        self.events.append("libxc-record index=%d offset=0x%x batches_before=%d type=%s length=%d fnv=%s"
                           % (self.libxc_index, start, self.batches, type_name(LIBXC_NAMES, rtype), len(body),
                              fnv1a64(body)))
        self.libxc_index += 1
        return start

    def page_data(self, entries, label=None, raw_entries=None, count=None, reserved=0, extra=b""):
        """entries: list of (pfn, type, data-or-None). raw_entries overrides the encoded u64s (damage)."""
        start = self.off()
        words = raw_entries if raw_entries is not None else [(t << 60) | pfn for pfn, t, _ in entries]
        n = len(words) if count is None else count
        body = struct.pack("<II", n, reserved) + b"".join(struct.pack("<Q", w) for w in words)
        body += b"".join(d for _, _, d in entries if d is not None) + extra
        self._record(PAGE_DATA, body)
        where = "libxc record %d (PAGE_DATA) at offset 0x%x" % (self.libxc_index, start)
        if label:
            self.marks[label] = (where, start, len(body))
        if not self.seen_sde and self.libxc_version < 3:
            self.events.append("static-data-end-inferred offset=0x%x" % start)
            self.seen_sde = True
        self.events.append("page-batch index=%d batch=%d offset=0x%x count=%d"
                           % (self.libxc_index, self.batches, start, len(entries)))
        for pfn, t, d in entries:
            self.events.append("page pfn=0x%x type=0x%x fnv=%s" % (pfn, t, fnv1a64(d) if d is not None else "-"))
        self.libxc_index += 1
        self.batches += 1
        return start

    def finish(self):
        self.events.append("end")
        return bytes(self.buf)


# ---- plausible record bodies ----
CONFIG = (b'{"c_info":{"type":"hvm","name":"vector-guest","uuid":"6a1e4f3c-0b5d-4d3e-9f2a-1c2b3d4e5f60"},'
          b'"b_info":{"max_vcpus":1,"max_memkb":32,"target_memkb":32,"shadow_memkb":1024,'
          b'"device_model_version":"qemu_xen","type.hvm":{"firmware":"bios"}}}\0')


def cpuid_policy():
    leaf = struct.Struct("<IIIIII")  # xen_cpuid_leaf_t: leaf, subleaf, a, b, c, d
    return (leaf.pack(0x0, 0xFFFFFFFF, 0xD, 0x756E6547, 0x6C65746E, 0x49656E69)
            + leaf.pack(0x1, 0xFFFFFFFF, 0x000906EA, 0x00010800, 0xFEDA3203, 0x178BFBFF))


def msr_policy():
    entry = struct.Struct("<IIQ")  # xen_msr_entry_t: idx, flags, val
    return entry.pack(0xCE, 0, 0x80000000) + entry.pack(0x10A, 0, 0x0000000C)


def tsc_info(khz=2400000):
    return struct.pack("<IIQII", 0, khz, 123456789012, 1, 0)


def hvm_context():
    """hvm_save_header plus one CPU record and END, as xen/include/public/arch-x86/hvm/save.h lays them out."""
    header = struct.pack("<IIQII", 0x54381286, 1, 0, 0x000906EA, 2400000)
    cpu = bytearray(1032)  # struct hvm_hw_cpu
    struct.pack_into("<Q", cpu, 640, 0xFFFFFFFF81000000)  # rip
    struct.pack_into("<Q", cpu, 656, 0x80050033)          # cr0: PE, MP, ET, NE, WP, AM, PG
    struct.pack_into("<Q", cpu, 672, 0x1000)              # cr3: top-level page table in pfn 1
    struct.pack_into("<Q", cpu, 680, 0x3406F0)            # cr4 with PAE
    struct.pack_into("<Q", cpu, 992, 0xD01)               # efer: SCE, LME, LMA, NXE
    return (struct.pack("<HHI", 1, 0, len(header)) + header + struct.pack("<HHI", 2, 0, len(cpu)) + bytes(cpu)
            + struct.pack("<HHI", 0, 0, 0))


def hvm_params(entries=((1, 0xFEFFC), (5, 0xFF000), (17, 0xFEFFF)), count=None):
    n = len(entries) if count is None else count
    return struct.pack("<II", n, 0) + b"".join(struct.pack("<QQ", i, v) for i, v in entries)


QEMU_BLOB = b"QEVM\0\0\0\3" + b"\x07\x00\x00\x00\x0ftimer\x00\x00\x00\x00\x00\x00\x00\x01" + b"\x1f"  # odd length


def emulator_body(payload, emulator=2, index=0):
    return struct.pack("<II", emulator, index) + payload


def basic_batches():
    return [[(p, NOTAB, page_bytes(p)) for p in range(4)],
            [(4, XTAB, None), (5, XALLOC, None), (6, NOTAB, page_bytes(6)), (7, NOTAB, page_bytes(7))]]


def build(fmt="xl", version=3, libxc_options=0, libxl_options=0, dtype=2, config=CONFIG, mandatory=0x3,
          batches=None, static=True, before_pages=(), after_pages=(), libxl_extra=(), xenstore=None,
          tsc=None, params=None, end_body=b"", drop_libxl_end=False, libxl_end_first=False):
    """A whole HVM save image in the order Xen 4.17's saver writes it, with knobs for the damaged cases."""
    s = Stream()
    if fmt == "xl":
        s.xl_header(config, mandatory=mandatory if config is not None else mandatory & ~1)
    if fmt in ("xl", "libxl"):
        s.libxl_header(libxl_options)
        if libxl_end_first:
            s.libxl_record(L_END, label="libxl-end-early")
        s.libxl_record(L_LIBXC, label="libxc-context")
    s.libxc_headers(version=version, options=libxc_options, dtype=dtype)
    if static:
        s.libxc_record(CPUID_POLICY, cpuid_policy(), label="cpuid")
        s.libxc_record(MSR_POLICY, msr_policy(), label="msr")
        s.libxc_record(STATIC_DATA_END, label="sde")
    for rtype, body, label in before_pages:
        s.libxc_record(rtype, body, label=label)
    for i, batch in enumerate(basic_batches() if batches is None else batches):
        if callable(batch):
            batch(s)
        else:
            s.page_data(batch, label="batch%d" % i)
    for rtype, body, label in after_pages:
        s.libxc_record(rtype, body, label=label)
    s.libxc_record(TSC_INFO, tsc_info() if tsc is None else tsc, label="tsc")
    s.libxc_record(HVM_CONTEXT, hvm_context(), label="hvm-context")
    s.libxc_record(HVM_PARAMS, hvm_params() if params is None else params, label="hvm-params")
    s.libxc_record(END, end_body, label="libxc-end")
    if fmt in ("xl", "libxl"):
        if xenstore is not None:
            s.libxl_record(L_XENSTORE, emulator_body(xenstore), label="xenstore")
        s.libxl_record(L_EMU, emulator_body(QEMU_BLOB), label="emulator")
        for rtype, body, label in libxl_extra:
            s.libxl_record(rtype, body, label=label)
        if not drop_libxl_end:
            s.libxl_record(L_END, label="libxl-end")
    return s


# ---- the vectors ----
# Each entry: file name, format, expected outcome (ok | corrupt | unsupported), what verify-stream-v2 does
# (pass | fail), round trip (exact: export reproduces the bytes; final: same final pages and records; - for
# errors), and for errors a substring the message must contain (naming record and offset).
VECTORS = []


def valid(name, fmt, s, verifier="pass", roundtrip="exact"):
    VECTORS.append((name, fmt, "ok", verifier, roundtrip, "-", s.finish(), s.events))


def damaged(name, fmt, data, code, message, verifier="fail"):
    VECTORS.append((name, fmt, code, verifier, "-", message, bytes(data), None))


def make_vectors():
    # -- valid --
    valid("hvm-basic.xl", "xl", build())
    valid("hvm-basic.libxl", "libxl", build(fmt="libxl"))
    valid("hvm-basic.libxc", "libxc", build(fmt="libxc"))
    valid("hvm-no-config.xl", "xl", build(config=None, mandatory=0x2))
    valid("hvm-v2-no-static-data-end.xl", "xl", build(version=2, static=False))
    valid("hvm-xenstore-data.xl", "xl",
          build(xenstore=b"physmap/1/start_addr\0f0000000\0physmap/1/size\0800000\0"))
    # Unknown optional records are kept (and exported); verify-stream-v2 rejects every unknown type.
    valid("hvm-optional-records.xl", "xl",
          build(before_pages=[(0x80000123, b"optional-odd!", "opt")],
                libxl_extra=[(0x80000042, b"libxl optional", "libxl-opt")]),
          verifier="fail")
    # A live save: later passes resend pfns 1 and 3, pfn 6 becomes a hole, hole 4 gets data.
    resend = basic_batches() + [[(1, NOTAB, page_bytes(1, 1)), (3, NOTAB, page_bytes(3, 1))],
                                [(6, XTAB, None), (4, NOTAB, page_bytes(4, 1))]]
    valid("hvm-live-resend.xl", "xl", build(batches=resend), roundtrip="final")
    # `xl save --debug`-style: VERIFY, then a second copy of every page; export writes one copy, no VERIFY.
    copies = basic_batches()
    verify = [lambda s: s.libxc_record(VERIFY, label="verify")] + basic_batches()
    valid("hvm-verify-copies.xl", "xl", build(batches=copies + verify), roundtrip="final")

    # -- damaged: truncation --
    s = build()
    data = s.finish()
    damaged("truncated-xl-header.xl", "xl", data[:20], "corrupt", "xl header at offset 0x0: truncated")
    where, start, length = s.marks["batch0"]
    damaged("truncated-page-data.xl", "xl", data[:start + 8 + 100], "corrupt", where + ": truncated")
    where, start, length = s.marks["libxc-end"]
    cut = start + 8
    damaged("truncated-after-libxc-end.xl", "xl", data[:cut], "corrupt",
            "libxl record 1 header at offset 0x%x: truncated" % cut)
    # -- padding --
    where, start, length = s.marks["emulator"]
    bad = bytearray(data)
    bad[start + 8 + length] = 0x5A
    damaged("bad-padding-libxl.xl", "xl", bad, "corrupt", where + ": padding byte")
    s2 = build(before_pages=[(0x80000123, b"optional-odd!", "opt")])
    data2 = bytearray(s2.finish())
    where, start, length = s2.marks["opt"]
    data2[start + 8 + length + 2] = 0x01
    damaged("bad-padding-libxc.xl", "xl", data2, "corrupt", where + ": padding byte")
    # -- unknown records --
    s = build(before_pages=[(0x13, b"\0" * 8, "unknown")])
    damaged("unknown-mandatory-libxc.xl", "xl", s.finish(), "unsupported",
            s.marks["unknown"][0] + ": unknown mandatory record")
    s = build(libxl_extra=[(0x6, b"", "unknown")])
    damaged("unknown-mandatory-libxl.xl", "xl", s.finish(), "unsupported",
            s.marks["unknown"][0] + ": unknown mandatory record")
    # -- byte order --
    # Xen's restorers (xc read_headers, libxl stream_header_done) refuse these; verify-stream-v2 4.17 does not
    # notice: it tests `options & HDR_OPT_BIT_ENDIAN`, the bit number 0, instead of the bit mask.
    s = build(libxc_options=1)
    damaged("big-endian-libxc.xl", "xl", s.finish(), "unsupported", s.marks["libxc-headers"][0] + ": big-endian",
            verifier="pass")
    damaged("big-endian-libxl.xl", "xl", build(libxl_options=1).finish(), "unsupported",
            "libxl header at offset 0x%x: big-endian" % (48 + 4 + len(CONFIG)), verifier="pass")
    damaged("big-endian-xl.xl", "xl",
            _xl_only(byteorder=0x04030201), "unsupported", "xl header at offset 0x0: byte order marker 0x04030201")
    # -- versions and headers --
    s = build(version=4)
    damaged("libxc-version-4.xl", "xl", s.finish(), "unsupported", s.marks["libxc-headers"][0] + ": version 4")
    s = build(dtype=1)
    damaged("pv-domain.xl", "xl", s.finish(), "unsupported", s.marks["libxc-domain-header"][0] + ": x86 PV",
            verifier="pass")
    damaged("xl-bad-magic.xl", "xl", _xl_only(magic=b"Xen saved domain, xm format\n \0 \r"), "corrupt",
            "xl header at offset 0x0: bad magic")
    damaged("xl-unknown-mandatory-flag.xl", "xl", build(mandatory=0x7).finish(), "unsupported",
            "xl header at offset 0x0: unknown mandatory flags 0x4", verifier="pass")
    damaged("xl-legacy-v1.xl", "xl", build(mandatory=0x1).finish(), "unsupported",
            "xl header at offset 0x0: mandatory flags 0x1 lack STREAMv2")
    # -- static data end --
    s = build(static=False)
    damaged("v3-without-static-data-end.xl", "xl", s.finish(), "corrupt",
            s.marks["batch0"][0] + ": PAGE_DATA before STATIC_DATA_END", verifier="pass")
    s = build(before_pages=[(STATIC_DATA_END, b"", "sde2")])
    damaged("second-static-data-end.xl", "xl", s.finish(), "corrupt", s.marks["sde2"][0] + ": second STATIC_DATA_END",
            verifier="pass")
    # -- PAGE_DATA fields --
    dup = [[(1, NOTAB, page_bytes(1)), (3, NOTAB, page_bytes(3)), (1, NOTAB, page_bytes(1))]]
    s = build(batches=dup)
    damaged("duplicate-pfn-in-record.xl", "xl", s.finish(), "corrupt",
            s.marks["batch0"][0] + ": pfn 0x1 appears twice (entries 0 and 2)", verifier="pass")
    s = build(batches=[lambda s: s.page_data([(4, XTAB, None)], label="batch0", extra=page_bytes(4))])
    damaged("xtab-with-data.xl", "xl", s.finish(), "corrupt",
            s.marks["batch0"][0] + ": body length 4112 (expected 8 + 8 x 1 + 4096 x 0 = 16")
    s = build(batches=[lambda s: s.page_data([(4, 0x5, None)], label="batch0")])
    damaged("reserved-page-type.xl", "xl", s.finish(), "corrupt",
            s.marks["batch0"][0] + ": pfn entry 0 (0x5000000000000004): page type 0x5 is reserved")
    s = build(batches=[lambda s: s.page_data([(4, XTAB, None)], label="batch0",
                                             raw_entries=[(XTAB << 60) | (1 << 55) | 4])])
    damaged("pfn-reserved-bits.xl", "xl", s.finish(), "corrupt", s.marks["batch0"][0] + ": pfn entry 0 (0xf080000000000004): reserved bits 52-59 set")
    s = build(batches=[lambda s: s.page_data([], label="batch0")])
    damaged("page-data-count-zero.xl", "xl", s.finish(), "corrupt", s.marks["batch0"][0] + ": count 0 (expected 1..1024)")
    s = build(batches=[[(p, XTAB, None) for p in range(1025)]])
    damaged("page-data-count-1025.xl", "xl", s.finish(), "corrupt",
            s.marks["batch0"][0] + ": count 1025 (expected 1..1024)", verifier="pass")
    s = build(batches=[lambda s: s.page_data([(4, XTAB, None)], label="batch0", reserved=7)])
    damaged("page-data-reserved-field.xl", "xl", s.finish(), "corrupt", s.marks["batch0"][0] + ": reserved field 0x7")
    # -- other record lengths --
    s = build(tsc=tsc_info()[:16])
    damaged("tsc-info-bad-length.xl", "xl", s.finish(), "corrupt", s.marks["tsc"][0] + ": body length 16 (expected 24)")
    s = build(params=hvm_params(count=4))
    damaged("hvm-params-bad-length.xl", "xl", s.finish(), "corrupt",
            s.marks["hvm-params"][0] + ": body length 56 (expected 8 + 16 x count 4 = 72)")
    s = build(end_body=b"\0" * 8)
    damaged("libxc-end-with-body.xl", "xl", s.finish(), "corrupt", s.marks["libxc-end"][0] + ": body length 8 (expected 0)")
    # A record header claiming more than the restorer's 128 MiB, with no body after it.
    s = build()
    data = s.finish()
    where, start, length = s.marks["hvm-context"]
    huge = bytearray(data[:start]) + struct.pack("<II", HVM_CONTEXT, (128 << 20) + 8)
    damaged("record-over-128mib.xl", "xl", huge, "corrupt", where + ": body length 0x8000008 exceeds the limit")
    # -- stream structure --
    s = build(libxl_end_first=True)
    damaged("libxl-end-before-libxc.xl", "xl", s.finish(), "corrupt",
            s.marks["libxl-end-early"][0] + ": END before any LIBXC_CONTEXT", verifier="pass")
    s = build(after_pages=[(CHECKPOINT, b"", "checkpoint")])
    damaged("checkpoint-record.xl", "xl", s.finish(), "unsupported", s.marks["checkpoint"][0] + ": checkpointed",
            verifier="pass")
    data = build().finish()
    damaged("trailing-bytes.xl", "xl", data + b"\0" * 8, "corrupt",
            "end of stream at offset 0x%x: unexpected data after the END record" % len(data), verifier="pass")


def _xl_only(byteorder=0x01020304, magic=XL_MAGIC):
    s = Stream()
    s.xl_header(CONFIG, byteorder=byteorder, magic=magic)
    return s.finish()


def main(argv):
    if len(argv) != 2:
        sys.stderr.write(__doc__)
        return 2
    out = argv[1]
    os.makedirs(out, exist_ok=True)
    make_vectors()
    manifest = ["# file\tformat\texpect\tverifier\troundtrip\tmessage"]
    for name, fmt, expect, verifier, roundtrip, message, data, events in VECTORS:
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
        if events is not None:
            with open(os.path.join(out, name + ".expect"), "w") as f:
                f.write("\n".join(events) + "\n")
        manifest.append("\t".join([name, fmt, expect, verifier, roundtrip, message]))
    with open(os.path.join(out, "MANIFEST"), "w") as f:
        f.write("\n".join(manifest) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
