"""halite.libvirt against a real libvirt (the embedded QEMU driver) and the test guest (TCG), as a broker would use
it: the guest saved with halite.libvirt.save, a lazy clone killed mid-restore and resumed, a clone with shared
memory; each continues memcheck. Run by
ctest python/libvirt (label libvirt), which sets HALITE_LIBVIRT_TOOLS to the build's tools; the python/pytest run
skips it saying so."""
from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
TOOLS = os.environ.get("HALITE_LIBVIRT_TOOLS", "")
pytestmark = pytest.mark.skipif(not TOOLS, reason="needs libvirt and the test guest: run by ctest python/libvirt "
                                                  "(HALITE_LIBVIRT_TOOLS=the build's tools directory)")


def harness() -> Any:
    """The libvirt guest tests' harness (libvirt-integration/tests), imported only when the test runs."""
    sys.path.insert(0, str(REPO / "libvirt-integration" / "tests"))
    return importlib.import_module("libvirt_guest_test")


def wait_for_state(path: Path, state: str, proc: "subprocess.Popen[bytes]", timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if json.loads(path.read_text()).get("state") == state:
                return
        except (OSError, ValueError):
            pass
        if proc.poll() is not None:
            pytest.fail(f"the restore exited {proc.returncode} before {path} said {state}")
        time.sleep(0.05)
    pytest.fail(f"{path} did not say {state} within {timeout} s")


def test_clone_shared_and_resume_of_a_killed_restore(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    preload = os.environ.get("LD_PRELOAD")
    if preload and "asan" in preload:
        # With libasan preloaded by run_pytest.sh the harness's qemu-img hung (session 15), and with it kept from
        # the harness the guest did not boot within 10 minutes; not understood yet. The C API under ASan:
        # capi/libvirt-session.
        pytest.skip("ASan build: the libvirt guest harness does not run under a preloaded libasan (see the test)")
    lgt = harness()
    # virsh, qemu-img and libvirt's QEMU must not inherit a preload, only the processes that load libhalite.
    monkeypatch.delenv("LD_PRELOAD", raising=False)
    run_env = dict(os.environ, **({"LD_PRELOAD": preload} if preload else {}))
    if not os.path.exists("/dev/fuse"):
        pytest.skip("no /dev/fuse: the image server and the RAM directory server are FUSE file systems")
    env = lgt.Env(TOOLS, str(tmp_path / "guest"))
    try:
        env.setup()
    except lgt.Skip as e:
        pytest.skip(f"libvirt guest: {e}")
    servers: list[tuple[int, str]] = []
    try:
        env.boot_source()
        ckpt = env.path("desk.hlt")
        script = str(Path(__file__).with_name("libvirt_script.py"))
        saved = subprocess.run([sys.executable, script, "save", env.uri, ckpt], capture_output=True, text=True,
                               timeout=600, env=run_env)
        print(saved.stdout, saved.stderr)
        assert saved.returncode == 0, saved.stderr[-3000:]
        figures = json.loads(saved.stdout)
        assert figures["data_pages"] > 0 and figures["data_pages"] + figures["zero_pages"] >= 65536
        assert figures["checkpoint_bytes"] == os.path.getsize(ckpt)
        assert "desk" not in env.domains(), "then='destroy' destroyed the domain"
        saved_after = max(int(m.group(1)) for m in lgt.OK_RX.finditer(lgt.read(env.path("desk.serial.log"))))
        disks, status, images, run_dir = (tmp_path / d for d in ("disks", "status", "images", "restores"))
        for d in (disks, status, images, run_dir):
            d.mkdir()
        run_env["HALITE_RUN_DIR"] = str(run_dir)
        # No tool is run: hlt-restore and halite-image-server on PATH are tripwires; the library starts its own
        # daemon, found beside libhalite.so.
        wire = lgt.tool_tripwire(str(tmp_path / "tripwire"))
        run_env["PATH"] = wire + os.pathsep + os.environ["PATH"]
        common = [env.uri, ckpt, str(disks), str(status)]
        lazy = subprocess.Popen([sys.executable, script, "lazy", *common], env=run_env)
        try:
            wait_for_state(status / "pr1", "running", lazy, 180)
            time.sleep(1.0)  # mid-restore: 2 MiB/s leaves most of the 256 MiB guest to load
            assert lazy.poll() is None, "the lazy restore ended before its kill"
            os.kill(lazy.pid, signal.SIGKILL)
        finally:
            lazy.kill()
            lazy.wait()
        assert len(os.listdir(run_dir)) == 1, "the killed restore left its record"
        out = subprocess.run([sys.executable, script, "main", *common, str(images)], env=run_env,
                             capture_output=True, text=True, timeout=900)
        print(out.stdout, out.stderr)
        assert out.returncode == 0, out.stderr[-3000:]
        reports = {r["what"]: r for r in map(json.loads, out.stdout.splitlines())}
        resumed, shared = reports["resume"], reports["shared"]
        assert resumed["domain"] == "pr1" and resumed["stats"]["resumed"] is True
        assert resumed["stats"]["state"] == "done" and resumed["stats"]["pages_sent"] > 0
        assert any("resuming the restore of" in e["text"] for e in resumed["events"])
        assert os.listdir(run_dir) == [], "the record is gone once the resume completed"
        assert shared["domain"] == "ps1" and len(shared["uuid"]) == 36
        assert shared["stats"]["state"] == "done" and shared["stats"]["running_seconds"] > 0
        assert any("as its guest RAM" in e["text"] for e in shared["events"]), "QEMU maps the image"
        assert shared["events"][-1]["kind"] == "done"
        assert json.loads((status / "ps1").read_text())["state"] == "completed"
        stats = [images / d / ".stats" for d in os.listdir(images) if (images / d / ".stats").exists()]
        servers += [(json.loads(s.read_text())["pid"], "image server") for s in stats]
        servers += [(pid, "RAM directory server") for pid in lgt.find_pids("serve-ram-dir", env.root)]
        assert len(stats) == 1, f"one image server under {images}: {stats}"
        assert len(servers) == 2, f"the image server and the RAM directory server: {servers}"
        lgt.expect_daemon(servers, env.daemon_bin)
        assert lgt.tripped(wire) == [], f"a restore through halite ran a program from PATH: {lgt.tripped(wire)}"
        for name in ("pr1", "ps1"):
            passes = env.wait_passes(env.path("desk.serial.log." + name), 2, after=saved_after)
            print(f"{name} continues memcheck: passes {passes[:3]} (the save was after pass {saved_after})")
        # The example broker's libvirt mode: two clones on demand, sharing the golden image's pages, through the
        # same servers (libhalite's daemon; the tripwires on PATH again).
        report = tmp_path / "broker.json"
        broker = subprocess.run([sys.executable, str(REPO / "examples" / "broker.py"), ckpt, "--libvirt", env.uri,
                                 "--memory", "shared", "--image-dir", str(images), "--clones", "2",
                                 "--work", str(tmp_path / "broker"), "--json", str(report)],
                                env=run_env,
                                capture_output=True, text=True, timeout=600)
        print(broker.stdout, broker.stderr)
        assert broker.returncode == 0, broker.stderr[-3000:]
        clones = json.loads(report.read_text())["clones"]
        assert [(c["name"], c["domain"], c["state"]) for c in clones] == [("clone1", "clone1", "complete"),
                                                                          ("clone2", "clone2", "complete")]
        for c in clones:
            assert 0 < c["library_running_ms"] <= c["to_running_ms"], c
            assert c["stats"]["state"] == "done", c
        assert {"clone1", "clone2"} <= set(env.domains()), "the clones are libvirt's and outlive the broker"
        assert lgt.tripped(wire) == [], f"the broker ran a program from PATH: {lgt.tripped(wire)}"
        servers += [(pid, "RAM directory server") for pid in lgt.find_pids("serve-ram-dir", env.root)
                    if (pid, "RAM directory server") not in servers]
        for name in ("clone1", "clone2"):
            passes = env.wait_passes(env.path("desk.serial.log." + name), 2, after=saved_after)
            print(f"broker's {name} continues memcheck: passes {passes[:3]}")
    except lgt.Fail as e:
        pytest.fail(str(e))
    finally:
        if os.path.exists(env.root):
            for name in env.domains():
                env.virsh("destroy", name, check=False)
        for pid, what in servers:
            lgt.stop_server(pid, what)
        env.cleanup()
