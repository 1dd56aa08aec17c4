"""halite.Server (hlt_server_*): a checkpoint served by libhalite's own daemon, found beside the library with no
program on PATH, its regions read back as image files, a second Server finding the same process, a stop refused
while a file is open and obeyed with force."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

import halite
from conftest import PAGE

pytestmark = pytest.mark.skipif(not os.access("/dev/fuse", os.R_OK | os.W_OK),
                                reason="no usable /dev/fuse: the image server is a FUSE file system")


def test_serve_read_find_and_stop(tmp_path: Path, checkpoint_path: Path, memory: bytearray,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))  # no tool, no daemon on PATH: the library finds its own
    images = tmp_path / "images"
    try:
        server = halite.serve(checkpoint_path, image_dir=images, exit_when_unused=0, environment=False)
    except halite.HaliteIOError as e:
        if "fuse" in str(e).lower() or "mount" in str(e).lower():
            pytest.skip(f"FUSE mount refused here: {e}")
        raise
    with server:
        assert server.started and server.pid > 0
        exe = os.readlink(f"/proc/{server.pid}/exe")
        assert exe.endswith("/halite-image-server"), f"the server runs {exe}, not libhalite's daemon"
        assert Path(server.mount).parent == images
        ram = server.image("pc.ram")
        assert ram == os.path.join(server.mount, "ckpt.pc.ram")
        assert Path(ram).read_bytes() == bytes(memory)
        assert Path(server.image("vga.vram")).read_bytes() == bytes(memory[:64 * PAGE])
        with pytest.raises(halite.NotFoundError):
            server.image("nope")
        with halite.Server(checkpoint_path, image_dir=images, environment=False) as again:
            assert not again.started and again.pid == server.pid
        held = os.open(ram, os.O_RDONLY)  # a VMM's mapping: a plain stop is refused
        try:
            with pytest.raises(halite.AbortedError, match="did not stop"):
                server.stop(timeout=1.5)
            assert os.pread(held, PAGE, 0) == bytes(memory[:PAGE]), "still served after the refusal"
            server.stop(force=True)
        finally:
            try:
                os.close(held)
            except OSError:
                pass  # ENOTCONN: the forced stop took the file system away under it
        assert not os.path.exists(ram), "unmounted once stopped"
    with pytest.raises(halite.InvalidArgumentError):
        server.image()
