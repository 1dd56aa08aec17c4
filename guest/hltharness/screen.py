"""Read the desktop guest's two counters from a screendump, without OCR.

The page the desktop shows (guest/desktop/image/rootfs/desktop/usr/share/halite/counters.html) draws each counter
as a row of large square blocks separated by background gaps:

    [marker] [20 bits, most significant first] [parity] [end]

- marker: magenta for the timer counter (advanced every 100 ms), cyan for the key counter (advanced by each key
  press); end: yellow;
- the 20 bits are the counter's Gray code (n ^ (n >> 1)), red for 1 and blue for 0; parity: red if the number of
  1 bits among the 20 is odd. Successive values differ in one block, so a screendump taken while the page repaints
  reads as the old or the new value; a torn read that mixes the parity block of one value with the bits of another
  is rejected by the parity check (the caller takes another screendump).

Colours are classified per channel (>= 0xA0 high, <= 0x60 low, anything else matches nothing), so scaling,
16-bit colour depth and anti-aliased block edges do not matter, and the rows are found wherever the page is drawn
(window position, size, zoom). A row that is not fully visible reads as None with the reason.

    counters = read_counters(load_image("screen.ppm"))  # Counters(timer=123, keys=4, problems=[])

Screendumps: QEMU's QMP `screendump` writes PPM by default (read here without any library), or PNG with
"format": "png" (read through PIL, python3-pil); libvirt's `virsh screenshot` writes PPM for QEMU.
"""

BITS = 20
ROW_BLOCKS = BITS + 3  # marker, bits, parity, end
# Per-channel level code of each colour the page uses ("1" high, "0" low).
COLOURS = {
    "timer": b"101",  # magenta #ff00ff
    "keys": b"011",  # cyan #00ffff
    "one": b"100",  # red #ff0000
    "zero": b"001",  # blue #0000ff
    "end": b"110",  # yellow #ffff00
}
CSS_COLOURS = {"timer": "#ff00ff", "keys": "#00ffff", "one": "#ff0000", "zero": "#0000ff", "end": "#ffff00"}
_NAMES = {code: name for name, code in COLOURS.items()}
_LEVELS = bytes(ord("1") if v >= 0xA0 else ord("0") if v <= 0x60 else ord("x") for v in range(256))
MIN_BLOCK_PX = 6  # smaller blocks are not the page's (it draws them at 3 % of the window width)


class ImageError(ValueError):
    pass


class Image:
    """An RGB image: width, height and 3 bytes a pixel, rows top to bottom."""

    def __init__(self, width, height, rgb):
        if len(rgb) != width * height * 3:
            raise ImageError(f"{width}x{height} image needs {width * height * 3} bytes, got {len(rgb)}")
        self.width = width
        self.height = height
        self.rgb = bytes(rgb)

    def pixel(self, x, y):
        i = (y * self.width + x) * 3
        return tuple(self.rgb[i:i + 3])

    def levels(self, y):
        """Row y as 3 level characters a pixel (b"1", b"0" or b"x" per channel)."""
        start = y * self.width * 3
        return self.rgb[start:start + self.width * 3].translate(_LEVELS)


def parse_ppm(data, name="image"):
    """A binary PPM (P6, maxval 255 or less), as QEMU's screendump writes it."""
    fields = []
    pos = 0
    while len(fields) < 4:
        while pos < len(data) and data[pos:pos + 1].isspace():
            pos += 1
        if data[pos:pos + 1] == b"#":
            pos = data.index(b"\n", pos) + 1 if b"\n" in data[pos:] else len(data)
            continue
        end = pos
        while end < len(data) and not data[end:end + 1].isspace():
            end += 1
        if end == pos:
            raise ImageError(f"{name}: truncated PPM header")
        fields.append(data[pos:end])
        pos = end
    if fields[0] != b"P6":
        raise ImageError(f"{name}: not a binary PPM (magic {fields[0][:8]!r}, expected P6)")
    try:
        width, height, maxval = (int(f) for f in fields[1:])
    except ValueError:
        raise ImageError(f"{name}: PPM header fields are not numbers: {fields[1:]}")
    if not (0 < width <= 16384 and 0 < height <= 16384 and 0 < maxval < 256):
        raise ImageError(f"{name}: PPM {width}x{height} maxval {maxval} not supported (8-bit, at most 16384 px)")
    pos += 1  # the single whitespace byte after maxval
    rgb = data[pos:pos + width * height * 3]
    if len(rgb) != width * height * 3:
        raise ImageError(f"{name}: PPM pixel data at offset {pos} is {len(rgb)} bytes, expected "
                         f"{width * height * 3}")
    if maxval != 255:
        rgb = bytes(min(255, v * 255 // maxval) for v in rgb)
    return Image(width, height, rgb)


def load_image(path):
    """A screendump: PPM (read here) or PNG (read through PIL)."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:1] == b"P" and data[1:2].isdigit():  # a PNM; parse_ppm says if it is not the binary RGB kind
        return parse_ppm(data, path)
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        try:
            from PIL import Image as PilImage
        except ImportError:
            raise ImageError(f"{path}: a PNG needs PIL (python3-pil) to be read; take the screendump as PPM "
                             "(QMP screendump without \"format\") instead")
        with PilImage.open(path) as im:
            rgb = im.convert("RGB")
            return Image(rgb.width, rgb.height, rgb.tobytes())
    raise ImageError(f"{path}: neither a binary PPM nor a PNG (first bytes {data[:8]!r})")


def write_ppm(image, path):
    with open(path, "wb") as f:
        f.write(b"P6\n%d %d\n255\n" % (image.width, image.height) + image.rgb)


def gray_decode(g):
    n = 0
    while g:
        n ^= g
        g >>= 1
    return n


class Counters:
    """What a screendump showed: timer and keys (int, or None if that row could not be read), and why not."""

    def __init__(self, timer, keys, problems):
        self.timer = timer
        self.keys = keys
        self.problems = problems

    @property
    def complete(self):
        return self.timer is not None and self.keys is not None

    def __repr__(self):
        return f"Counters(timer={self.timer}, keys={self.keys}, problems={self.problems})"


def _segments(levels, x0, width):
    """Runs of one colour name (None for anything else) along a row from x0: [name, start, length]."""
    out = []
    for x in range(x0, width):
        name = _NAMES.get(levels[3 * x:3 * x + 3])
        if out and out[-1][0] == name:
            out[-1][2] += 1
        else:
            out.append([name, x, 1])
    return out


def _decode_row(image, which, x0, block, yc):
    """The counter of the row whose marker starts at x0 and is `block` px wide, along row yc; (value, problem)."""
    blocks = [s for s in _segments(image.levels(yc), x0, image.width)
              if s[0] is not None and s[2] >= max(2, block // 3)]
    row = []
    for s in blocks:
        row.append(s)
        if s[0] == "end" or len(row) == ROW_BLOCKS:
            break
    if len(row) != ROW_BLOCKS or row[-1][0] != "end":
        return None, f"{which} row at y={yc}: {len(row)} blocks up to the end marker, expected {ROW_BLOCKS}"
    for prev, cur in zip(row, row[1:]):
        if cur[1] - (prev[1] + prev[2]) > block:
            gap = cur[1] - prev[1] - prev[2]
            return None, f"{which} row at y={yc}: a gap of {gap} px at x={cur[1]} (a missing block)"
    for name, start, length in row[1:-1]:
        if name not in ("one", "zero") or not 0.6 * block <= length <= 1.5 * block:
            return None, (f"{which} row at y={yc}: block at x={start} is {name} of {length} px, expected a bit of "
                          f"~{block} px")
    bits = [1 if name == "one" else 0 for name, _, _ in row[1:-1]]
    if sum(bits[:BITS]) % 2 != bits[BITS]:
        return None, f"{which} row at y={yc}: parity mismatch (a torn screendump?)"
    gray = 0
    for b in bits[:BITS]:
        gray = gray << 1 | b
    return gray_decode(gray), None


def _read_row(image, which, scan_step):
    code = COLOURS[which]
    pattern = code * MIN_BLOCK_PX
    problem = f"{which} row: no {CSS_COLOURS[which]} marker block on the screen"
    y = 0
    while y < image.height:
        levels = image.levels(y)
        i = levels.find(pattern)
        while i >= 0 and i % 3:
            i = levels.find(pattern, i + 1)
        if i < 0:
            y += scan_step
            continue
        x0 = i // 3
        x1 = x0
        while x1 < image.width and levels[3 * x1:3 * x1 + 3] == code:
            x1 += 1
        block = x1 - x0
        xc = (x0 + x1) // 2
        top, bottom = y, y
        while top > 0 and image.levels(top - 1)[3 * xc:3 * xc + 3] == code:
            top -= 1
        while bottom + 1 < image.height and image.levels(bottom + 1)[3 * xc:3 * xc + 3] == code:
            bottom += 1
        height = bottom - top + 1
        if 0.5 * block <= height <= 2 * block:
            value, problem = _decode_row(image, which, x0, block, (top + bottom) // 2)
            if value is not None:
                return value, None
        y = bottom + 1  # not the page's marker, or not readable: look further down
    return None, problem


def read_counters(image, scan_step=2):
    """Both counters of the page, from an Image (load_image / parse_ppm)."""
    problems = []
    values = {}
    for which in ("timer", "keys"):
        values[which], problem = _read_row(image, which, scan_step)
        if problem:
            problems.append(problem)
    return Counters(values["timer"], values["keys"], problems)
