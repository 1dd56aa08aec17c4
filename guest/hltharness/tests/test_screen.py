#!/usr/bin/env python3
"""hltharness.screen on synthetic screendumps: the desktop page's two counters are read back exactly at any size and
position, through 16-bit colour and anti-aliased edges; torn, cut or missing rows read as None with the reason;
bad PPM files are rejected with a message naming them. The rows are drawn here from the page's specification
(guest/desktop/image/rootfs/desktop/usr/share/halite/counters.html), not with the reader's code, and the page's
own constants are checked against the reader's.

usage: test_screen.py [unittest options]     (PNG: test_screen_png.py)
"""

import os
import random
import re
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
sys.path.insert(0, os.path.join(REPO, "guest"))
from hltharness import screen  # noqa: E402

PAGE = os.path.join(REPO, "guest", "desktop", "image", "rootfs", "desktop", "usr", "share", "halite", "counters.html")
BG = (0x20, 0x20, 0x20)
RGB = {"magenta": (255, 0, 255), "cyan": (0, 255, 255), "red": (255, 0, 0), "blue": (0, 0, 255),
       "yellow": (255, 255, 0)}


class Canvas:
    def __init__(self, w, h, bg=BG):
        self.w, self.h = w, h
        self.px = bytearray(bytes(bg) * (w * h))

    def rect(self, x, y, w, h, rgb):
        for yy in range(max(0, y), min(self.h, y + h)):
            for xx in range(max(0, x), min(self.w, x + w)):
                i = (yy * self.w + xx) * 3
                self.px[i:i + 3] = bytes(rgb)

    def image(self):
        return screen.Image(self.w, self.h, bytes(self.px))


def row_colours(marker, value, parity_flip=False, bits_of=None):
    """The page's row, from its specification: marker, 20 Gray-code bits MSB first (red 1, blue 0), parity, end."""
    gray = value ^ (value >> 1)
    bit_gray = gray if bits_of is None else bits_of ^ (bits_of >> 1)
    bits = [(bit_gray >> (19 - i)) & 1 for i in range(20)]
    parity = bin(gray).count("1") & 1
    if parity_flip:
        parity ^= 1
    return [marker] + ["red" if b else "blue" for b in bits] + ["red" if parity else "blue", "yellow"]


def draw_row(c, x, y, block, gap, colours, edge=None, quantise=False):
    for i, name in enumerate(colours):
        rgb = RGB[name]
        if quantise:  # 16-bit colour (5-6-5), expanded back the way a framebuffer dump does
            rgb = (rgb[0] & 0xF8, rgb[1] & 0xFC, rgb[2] & 0xF8)
        bx = x + i * (block + gap)
        c.rect(bx, y, block, block, rgb)
        if edge:  # anti-aliased edges: a 1-pixel border halfway between the block and the background
            mid = tuple((a + b) // 2 for a, b in zip(rgb, BG))
            c.rect(bx, y, block, 1, mid)
            c.rect(bx, y + block - 1, block, 1, mid)
            c.rect(bx, y, 1, block, mid)
            c.rect(bx + block - 1, y, 1, block, mid)


def page(w, h, timer, keys, block=None, x=None, y=None, **kw):
    block = block or max(6, w * 3 // 100)
    gap = max(2, block // 5)
    x = block if x is None else x
    y = block if y is None else y
    c = Canvas(w, h)
    draw_row(c, x, y, block, gap, row_colours("magenta", timer), **kw)
    draw_row(c, x, y + 2 * block, block, gap, row_colours("cyan", keys), **kw)
    return c


class ReadCounters(unittest.TestCase):
    def test_values_read_back(self):
        rng = random.Random(27)
        values = [0, 1, 2, 3, 7, 8, 1023, 1024, (1 << 20) - 1] + [rng.randrange(1 << 20) for _ in range(12)]
        for timer in values:
            keys = values[(values.index(timer) + 3) % len(values)]
            got = screen.read_counters(page(1024, 768, timer, keys).image())
            self.assertEqual((got.timer, got.keys, got.problems), (timer, keys, []), f"timer={timer} keys={keys}")

    def test_any_size_and_position(self):
        for w, h, block, x, y in ((640, 480, 12, 5, 7), (800, 600, 8, 0, 0), (1920, 1080, 58, 100, 300),
                                  (1280, 800, 31, 17, 500)):
            got = screen.read_counters(page(w, h, 4242, 17, block=block, x=x, y=y).image())
            self.assertEqual((got.timer, got.keys), (4242, 17), f"{w}x{h} block {block} at {x},{y}: {got}")

    def test_sixteen_bit_colour_and_antialiased_edges(self):
        got = screen.read_counters(page(1024, 768, 987654, 3, edge=True, quantise=True).image())
        self.assertEqual((got.timer, got.keys), (987654, 3), got)

    def test_torn_row_rejected_by_parity(self):
        # The bits of 101 with the parity block of 100 still on the screen.
        c = Canvas(1024, 400)
        colours = row_colours("magenta", 100)
        colours[1:21] = row_colours("magenta", 101)[1:21]
        draw_row(c, 30, 30, 30, 6, colours)
        draw_row(c, 30, 90, 30, 6, row_colours("cyan", 5))
        got = screen.read_counters(c.image())
        self.assertIsNone(got.timer)
        self.assertEqual(got.keys, 5)
        self.assertTrue(any("parity" in p for p in got.problems), got.problems)

    def test_successive_values_differ_in_one_block(self):
        # Why a repaint caught half-way reads as the old or the new value: one bit block changes (and the parity).
        for n in range(5000):
            a, b = row_colours("magenta", n), row_colours("magenta", n + 1)
            self.assertEqual(sum(x != y for x, y in zip(a[1:21], b[1:21])), 1, n)

    def test_row_cut_at_the_screen_edge(self):
        c = page(700, 300, 55, 66, block=30, x=40)  # 23 blocks of 36 px from x=40 need 868 px
        got = screen.read_counters(c.image())
        self.assertIsNone(got.timer)
        self.assertIsNone(got.keys)
        self.assertTrue(all("end marker" in p for p in got.problems), got.problems)

    def test_missing_row(self):
        c = Canvas(1024, 300)
        draw_row(c, 30, 30, 30, 6, row_colours("magenta", 9))
        got = screen.read_counters(c.image())
        self.assertEqual(got.timer, 9)
        self.assertIsNone(got.keys)
        self.assertEqual(got.problems, ["keys row: no #00ffff marker block on the screen"])
        self.assertFalse(got.complete)

    def test_blank_screen(self):
        got = screen.read_counters(Canvas(1024, 768, bg=(0, 0, 0)).image())
        self.assertEqual((got.timer, got.keys, len(got.problems)), (None, None, 2))

    def test_decoy_marker_colour_elsewhere(self):
        # A magenta square that is not the page's (an icon, a wallpaper) above the row: the row is still found.
        c = page(1024, 768, 31337, 2, y=200)
        c.rect(500, 20, 40, 40, RGB["magenta"])
        c.rect(100, 100, 300, 10, RGB["cyan"])  # a cyan bar, not square
        got = screen.read_counters(c.image())
        self.assertEqual((got.timer, got.keys), (31337, 2), got)

    def test_merged_blocks_are_not_misread(self):
        # Without the gaps two equal bits would merge: the reader must refuse, not read a shorter number.
        c = Canvas(1024, 300)
        draw_row(c, 30, 30, 30, 0, row_colours("magenta", 0))
        got = screen.read_counters(c.image())
        self.assertIsNone(got.timer)


class Ppm(unittest.TestCase):
    def write(self, data):
        fd, path = tempfile.mkstemp(suffix=".ppm")
        os.write(fd, data)
        os.close(fd)
        self.addCleanup(os.unlink, path)
        return path

    def test_round_trip_with_comment(self):
        img = page(400, 200, 77, 88, block=10).image()
        path = self.write(b"P6\n# QEMU screendump\n400 200\n255\n" + img.rgb)
        got = screen.read_counters(screen.load_image(path))
        self.assertEqual((got.timer, got.keys), (77, 88))
        out = path + ".out"
        screen.write_ppm(img, out)
        self.addCleanup(os.unlink, out)
        with open(out, "rb") as f:
            self.assertEqual(screen.parse_ppm(f.read()).rgb, img.rgb)

    def test_rejections(self):
        cases = [
            (b"P5\n2 2\n255\n" + b"\0" * 4, "not a binary PPM"),
            (b"P6\n2 2\n255\n" + b"\0" * 11, "pixel data at offset 11 is 11 bytes, expected 12"),
            (b"P6\n2 x\n255\n", "not numbers"),
            (b"P6\n2 2\n65535\n" + b"\0" * 24, "not supported"),
            (b"P6\n2", "truncated PPM header"),
            (b"GIF89a", "neither a binary PPM nor a PNG"),
        ]
        for data, msg in cases:
            path = self.write(data)
            with self.assertRaises(screen.ImageError) as ctx:
                screen.load_image(path)
            self.assertIn(msg, str(ctx.exception))
            self.assertIn(path, str(ctx.exception))


class PageAgreesWithReader(unittest.TestCase):
    def test_constants(self):
        with open(PAGE) as f:
            text = f.read()
        self.assertEqual(int(re.search(r"const BITS = (\d+);", text).group(1)), screen.BITS)
        table = re.search(r"const COLOURS = \{([^}]*)\}", text).group(1)
        colours = dict(re.findall(r"(\w+): \"(#[0-9a-f]{6})\"", table))
        self.assertEqual(colours, screen.CSS_COLOURS)
        for name, css in colours.items():
            levels = bytes(ord("1") if int(css[i:i + 2], 16) >= 0xA0 else ord("0") for i in (1, 3, 5))
            self.assertEqual(levels, screen.COLOURS[name], name)
        self.assertIn("value ^ (value >>> 1)", text)  # Gray code


if __name__ == "__main__":
    unittest.main()
