#!/usr/bin/env python3
"""hltharness.screen reads PNG screendumps (QMP screendump "format": "png") through PIL: a synthetic page written
as PNG reads back. Exit 77 (skipped, said loudly) when this Python has no PIL (Debian package python3-pil)."""

import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_screen  # noqa: E402  (the synthetic page)
from hltharness import screen  # noqa: E402

try:
    from PIL import Image as PilImage
except ImportError:
    print("*" * 70 + f"\ntest_screen_png: SKIPPED: {sys.executable} has no PIL (python3-pil); PNG screendumps are "
          "read through it\n" + "*" * 70)
    sys.exit(77)

img = test_screen.page(1024, 768, 123456, 42).image()
fd, path = tempfile.mkstemp(suffix=".png")
os.close(fd)
try:
    PilImage.frombytes("RGB", (img.width, img.height), img.rgb).save(path)
    got = screen.read_counters(screen.load_image(path))
finally:
    os.unlink(path)
print(got)
if (got.timer, got.keys) != (123456, 42):
    print("FAIL: expected timer 123456, keys 42")
    sys.exit(1)
print("PASS")
