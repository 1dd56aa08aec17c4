#!/usr/bin/env python3
"""A real Debian guest (scripts/build-desktop-guest --variant minimal: systemd, Debian's kernel, the guest agent,
UEFI) saved and restored lazily by the tools, checked from inside the OS. Under TCG.

usage: realguest_test.py --tools DIR --work DIR SCENARIO

  build    builds the minimal image (or finds it cached by its recipe hash) and says how long it took
  qemu     boots it under QEMU (q35, OVMF with its own NVRAM, virtio disk overlay, NIC, agent channel, a TPM 2.0 on
           swtpm); once `systemctl is-system-running` says running (or degraded) through the agent: a token written
           to /run (tmpfs: guest memory), the journal's cursor, the TPM's PCRs 0 and 7; hlt-save qemu (stopped
           guest), the source QEMU killed; hlt-restore qemu lazily onto the same disk overlay and NVRAM, with a new
           swtpm on the same state directory. Then, from inside the restored OS: the agent answers on the new QEMU's
           socket, the system is still running with no new failed unit, the same boot (boot_id, uptime went on),
           the token is there, a file written and synced to the disk reads back, the same PCR values, no error line
           in the journal after the cursor. Then a desktop page that never shows: the harness's wait_for_page gives
           up in time and keeps the last screendump and names the serial log
  libvirt  the same guest as a libvirt domain (guest/desktop/domain.xml: UEFI + NVRAM, agent channel, pty serial
           console with a log, VNC, genid) under libvirt's embedded driver: booted, checked through libvirt's
           agent, hlt-save libvirt (--then destroy), hlt-restore libvirt (lazy, as itself) and the same checks;
           then destroyed and restored again as a clone (--clone): the same checks plus the clone's own UUID,
           MAC (seen by the guest) and generation ID
  errors   bad input: a package list naming a package Debian does not have (the build names it, exits 1, and leaves
           no image and no temporary directory), an unknown variant, missing firmware, a missing swtpm

Exit 0 pass, 1 fail, 77 skipped (QEMU, libvirt or userfaultfd unavailable; the reason is printed loudly). The
image is built once per recipe into the machine's cache (see scripts/build-desktop-guest), shared by both CI legs.
"""

import argparse
import ctypes
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "guest"))
from hltharness import domain, realguest  # noqa: E402
from hltharness.libvirt import EmbeddedLibvirt, LibvirtError, missing_prerequisite  # noqa: E402
from hltharness.qga import AgentError, VirshAgent  # noqa: E402
from hltharness.scratch import Scratch  # noqa: E402
from hltharness.wait import poll_until  # noqa: E402

BOOT_TIMEOUT = 420  # a loaded 2-core machine under TCG; an idle one boots the minimal guest in about 30 s


class Skip(Exception):
    pass


class Fail(Exception):
    pass


T0 = time.monotonic()


def log(msg):
    print(f"[{time.monotonic() - T0:7.1f} s] {msg}", flush=True)


def skip_loudly(why):
    print("*" * 70 + f"\nrealguest_test: SKIPPED: {why}\n" + "*" * 70, flush=True)
    sys.exit(77)


def need_qemu_and_uffd():
    try:
        realguest.qemu_binary()
    except realguest.MissingFile as e:
        raise Skip(str(e))
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.syscall(323, os.O_CLOEXEC | os.O_NONBLOCK)  # userfaultfd(2)
    if fd < 0:
        raise Skip("userfaultfd is not available to this user: QEMU's postcopy needs it (run as root or set "
                   "vm.unprivileged_userfaultfd=1)")
    os.close(fd)


def build(work):
    log("building the minimal guest (scripts/build-desktop-guest --variant minimal; cached by its recipe)")
    start = time.monotonic()
    try:
        image = realguest.build_image("minimal", log_path=os.path.join(work, "build-desktop-guest.log"))
    except realguest.BuildError as e:
        raise Fail(str(e))
    log(f"image {image.disk}: {'cached' if image.cached else 'built'} in {time.monotonic() - start:.1f} s, "
        f"qcow2 {os.path.getsize(image.disk) / 2**20:.0f} MiB, kernel {image.manifest.get('kernel_release')}, "
        f"build_s={image.manifest.get('build_s')}")
    return image


def run_tool(cmd, out_path, timeout=600):
    log("$ " + " ".join(cmd))
    start = time.monotonic()
    with open(out_path, "wb") as out, open(out_path + ".err", "wb") as err:
        p = subprocess.run(cmd, stdout=out, stderr=err, timeout=timeout)
    text = open(out_path, errors="replace").read() + open(out_path + ".err", errors="replace").read()
    return p.returncode, text, time.monotonic() - start


class GuestFacts:
    """What the guest says about itself through its agent, before a save and after a restore. Each question is one
    shell script in the guest (one guest-exec): through libvirt every agent command is a virsh of its own."""

    FACTS = ("echo boot_id=$(cat /proc/sys/kernel/random/boot_id); echo uptime=$(cut -d' ' -f1 /proc/uptime); "
             "echo state=$(systemctl is-system-running); "
             "echo failed=$(systemctl list-units --failed --no-legend --plain | cut -d' ' -f1 | sort | tr '\\n' ' '); "
             # The TPM's platform configuration registers the firmware extended while booting (none: no TPM).
             "echo tpm_pcrs=$(cat /sys/class/tpm/tpm0/pcr-sha256/0 /sys/class/tpm/tpm0/pcr-sha256/7 2>/dev/null | "
             "tr '\\n' ' ')")

    def __init__(self, agent):
        self.agent = agent

    def facts(self, script, timeout=60):
        r = self.agent.shell(script, timeout=timeout)
        if r.exitcode != 0:
            raise Fail(f"in the guest: `{script}` exited {r.exitcode}: {r.stdout}{r.stderr}")
        return dict(line.split("=", 1) for line in r.stdout.splitlines() if "=" in line)

    def snapshot(self):
        token = "%016x" % random.getrandbits(64)
        f = self.facts(f"echo {token} > /run/hlt-token && {self.FACTS}; "
                       "echo cursor=$(journalctl -q -n 1 --show-cursor -o cat | sed -n 's/^-- cursor: //p')")
        if not f.get("cursor"):
            raise Fail(f"no journal cursor from the guest: {f}")
        f["token"] = token
        f["uptime"] = float(f["uptime"])
        log(f"guest before the save: {f['state']} {f['failed']} boot_id {f['boot_id']} uptime {f['uptime']} s, "
            f"TPM PCR 0 and 7: {f['tpm_pcrs'] or 'no TPM'}")
        return f

    def check_after_restore(self, before, what):
        """The restored guest is the saved one, still running, with nothing new in its journal's errors."""
        start = time.monotonic()
        self.agent.wait_ready(120)
        log(f"{what}: the agent answers (ping) {time.monotonic() - start:.1f} s after the restore returned")
        token2 = "%016x" % random.getrandbits(64)
        f = self.facts(f"{self.FACTS}; echo token=$(cat /run/hlt-token); "
                       f"echo {token2} > /var/tmp/hlt-after-restore && sync && "
                       "echo disk=$(cat /var/tmp/hlt-after-restore)")
        if f["boot_id"] != before["boot_id"]:
            raise Fail(f"{what}: another boot_id: the guest booted afresh instead of being restored")
        uptime = float(f["uptime"])
        if uptime < before["uptime"]:
            raise Fail(f"{what}: uptime {uptime} s is below the saved {before['uptime']} s")
        if f["token"] != before["token"]:
            raise Fail(f"{what}: /run/hlt-token (guest memory) does not hold the token written before the save")
        if f["state"] not in ("running", "degraded") or f["failed"] != before["failed"]:
            raise Fail(f"{what}: systemctl is-system-running says {f['state']} (failed units: {f['failed']}); before "
                       f"the save {before['state']} ({before['failed']})")
        if f["disk"] != token2:
            raise Fail(f"{what}: a file written and synced to the disk does not read back")
        if f["tpm_pcrs"] != before["tpm_pcrs"]:
            raise Fail(f"{what}: the TPM's PCRs 0 and 7 are {f['tpm_pcrs']!r}, before the save {before['tpm_pcrs']!r} "
                       "(its state was not restored)")
        # A few seconds of the restored system's life for errors to show (services noticing the pause, the clock).
        time.sleep(3)
        j = self.agent.shell(f"journalctl -p err --after-cursor '{before['cursor']}' -o short-monotonic -q --no-pager; "
                             f"echo '-- warnings --'; journalctl -p warning --after-cursor '{before['cursor']}' "
                             "-o short-monotonic -q --no-pager")
        if j.exitcode != 0:
            raise Fail(f"{what}: journalctl in the guest exited {j.exitcode}: {j.stderr}")
        errors, warnings = (x.strip() for x in j.stdout.split("-- warnings --"))
        if errors:
            raise Fail(f"{what}: new error lines in the guest's journal after the restore:\n{errors}")
        log(f"{what}: same boot, uptime {before['uptime']} -> {uptime} s, token in /run, disk writes OK, system "
            f"{f['state']}, no new journal errors" + (f" (warnings:\n{warnings})" if warnings else ""))
        return uptime


def scenario_build(work, tools):
    build(work)


def restore_stats(path):
    with open(path) as f:
        return json.load(f)


def scenario_qemu(work, tools):
    need_qemu_and_uffd()
    image = build(work)
    # With a TPM 2.0 (swtpm): its state travels in the checkpoint's device state.
    inst = realguest.Instance(work, "rg", image, tpm=True)
    inst.prepare()
    restored_pid = None
    try:
        g = inst.start()
        log(f"source QEMU pid {g.proc.pid}: {' '.join(g.argv)}")
        try:
            running = realguest.wait_system_running(inst.agent(), BOOT_TIMEOUT, alive=inst.alive)
        except AgentError as e:
            raise Fail(f"{e}\n--- serial log ---\n{inst.serial_tail()}")
        on_serial = realguest.serial_system_state(inst.serial_log)
        log(f"booted: system {running.state} through the agent {time.monotonic() - g.started:.1f} s after QEMU "
            f"started" + (f"; serial console: {on_serial[0]} at guest uptime {on_serial[1]} s" if on_serial else ""))
        with open(inst.nvram, "rb") as f, open(realguest.FIRMWARE_VARS, "rb") as t:
            if f.read() == t.read():
                raise Fail(f"the firmware wrote nothing into the machine's NVRAM {inst.nvram} (its boot entries)")
        before = GuestFacts(inst.agent()).snapshot()
        if len(before["tpm_pcrs"].split()) != 2:
            raise Fail(f"the guest sees no TPM 2.0 PCRs: {before['tpm_pcrs']!r}")

        ckpt = os.path.join(work, "rg.hlt")
        rc, out, secs = run_tool([os.path.join(tools, "hlt-save"), "qemu", "--qmp", inst.qmp_path, "-o", ckpt,
                                  "--then", "stop"], os.path.join(work, "save.log"))
        print(out, flush=True)
        if rc != 0:
            raise Fail(f"hlt-save qemu exited {rc}")
        log(f"saved in {secs:.1f} s: {os.path.getsize(ckpt) / 2**20:.1f} MiB for {image.variant.mem_mib} MiB of RAM")
        g.proc.kill()
        g.proc.wait()

        inst.start_swtpm()  # the source's swtpm ended with its QEMU; the restored QEMU gets its state in the stream
        argv = inst.qemu_argv()
        stats_path = os.path.join(work, "restore.stats.json")
        qemu_dir = os.path.join(work, "restore.qemu")
        shutil.rmtree(qemu_dir, ignore_errors=True)
        for p in (inst.agent_path, inst.qmp_path):
            if os.path.exists(p):
                os.unlink(p)
        rc, out, secs = run_tool([os.path.join(tools, "hlt-restore"), "qemu", ckpt, "--stats-json", stats_path,
                                  "--qemu", argv[0], "--qemu-dir", qemu_dir, "--", *argv[1:]],
                                 os.path.join(work, "restore.log"))
        print(out, flush=True)
        m = re.search(r"QEMU \(pid (\d+)\)", out)
        restored_pid = int(m.group(1)) if m else None
        if rc != 0:
            raise Fail(f"hlt-restore qemu exited {rc}")
        st = restore_stats(stats_path)
        if not st.get("lazy"):
            raise Fail(f"the restore was not lazy: {st}")
        log(f"restored lazily in {secs:.1f} s: guest running at {st['start_to_running_us'] / 1e3:.0f} ms, every "
            f"page in at {st['start_to_loaded_us'] / 1e3:.0f} ms, {st['requests']} page requests, placement "
            f"{st['placement']}")
        GuestFacts(inst.agent()).check_after_restore(before, "restored guest")

        # The harness's own bad-input path: a desktop page that never shows (this guest has no display manager).
        start = time.monotonic()
        try:
            realguest.wait_for_page(realguest.QmpScreen(inst.qmp_path), 6, work, serial_log=inst.serial_log)
            raise Fail("wait_for_page found a page on a guest without a desktop")
        except realguest.PageTimeout as e:
            msg = str(e)
        kept = os.path.join(work, "page-timeout.ppm")
        if not os.path.exists(kept) or kept not in msg or inst.serial_log not in msg:
            raise Fail(f"the page timeout does not keep the last screendump and name the serial log: {msg}")
        log(f"a page that never shows: gave up after {time.monotonic() - start:.1f} s: {msg}")
    finally:
        inst.stop()
        if restored_pid:
            try:
                os.kill(restored_pid, 9)
            except ProcessLookupError:
                pass


def scenario_libvirt(work, tools):
    need_qemu_and_uffd()
    why = missing_prerequisite()
    if why:
        raise Skip(why)
    image = build(work)
    lv = EmbeddedLibvirt()
    lv.setup()
    try:
        run_libvirt(work, tools, image, lv)
    except LibvirtError as e:
        raise Fail(str(e))
    finally:
        lv.cleanup(keep_logs_in=work)


def domain_identity(lv, name):
    xml = lv.virsh("dumpxml", name)
    genid = re.search(r"<genid>([^<]+)</genid>", xml)
    return {"uuid": re.search(r"<uuid>([^<]+)</uuid>", xml).group(1),
            "mac": re.search(r"<mac address='([^']+)'", xml).group(1),
            "genid": genid.group(1) if genid else None}


def guest_macs(agent):
    return sorted(i.get("hardware-address") for i in agent.command("guest-network-get-interfaces")
                  if i.get("name") != "lo")


def run_libvirt(work, tools, image, lv):
    overlay = os.path.join(work, "desk.qcow2")
    if os.path.exists(overlay):
        os.unlink(overlay)
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-b", image.disk, "-F", "qcow2", overlay], check=True)
    nvram = os.path.join(work, "desk.vars.fd")
    if os.path.exists(nvram):
        os.unlink(nvram)
    xml = os.path.join(work, "desk.xml")
    with open(xml, "w") as f:
        f.write(domain.render("desk", image, overlay, nvram, os.path.join(work, "desk.serial.log")))
    start = time.monotonic()
    lv.virsh("create", xml)
    agent = VirshAgent(lv.uri, "desk")
    try:
        running = realguest.wait_system_running(agent, BOOT_TIMEOUT)
    except AgentError as e:
        with open(os.path.join(work, "desk.serial.log"), errors="replace") as f:
            raise Fail(f"{e}\n--- serial log ---\n{f.read()[-3000:]}")
    log(f"libvirt domain booted: system {running.state} {time.monotonic() - start:.1f} s after virsh create")
    if not os.path.exists(nvram) or open(nvram, "rb").read() == open(realguest.FIRMWARE_VARS, "rb").read():
        raise Fail(f"the domain's NVRAM {nvram} was not made from the template or never written by the firmware")
    before = GuestFacts(agent).snapshot()
    ident = domain_identity(lv, "desk")
    if guest_macs(agent) != [ident["mac"]]:
        raise Fail(f"the guest's NICs {guest_macs(agent)} are not the domain's {ident['mac']}")

    ckpt = os.path.join(work, "desk.hlt")
    rc, out, secs = run_tool([os.path.join(tools, "hlt-save"), "libvirt", "desk", "--connect", lv.uri, "-o", ckpt,
                              "--then", "destroy"], os.path.join(work, "lv-save.log"))
    print(out, flush=True)
    if rc != 0:
        raise Fail(f"hlt-save libvirt exited {rc}")
    log(f"saved in {secs:.1f} s: {os.path.getsize(ckpt) / 2**20:.1f} MiB")

    rc, out, secs = run_tool([os.path.join(tools, "hlt-restore"), "libvirt", ckpt, "--connect", lv.uri],
                             os.path.join(work, "lv-restore.log"))
    print(out, flush=True)
    if rc != 0:
        raise Fail(f"hlt-restore libvirt exited {rc}")
    log(f"restored as itself in {secs:.1f} s")
    GuestFacts(agent).check_after_restore(before, "libvirt restore")
    lv.destroy("desk")

    rc, out, secs = run_tool([os.path.join(tools, "hlt-restore"), "libvirt", ckpt, "--connect", lv.uri, "--clone",
                              "--name", "desk-clone1", "--disk-dir", work], os.path.join(work, "lv-clone.log"))
    print(out, flush=True)
    if rc != 0:
        raise Fail(f"hlt-restore libvirt --clone exited {rc}")
    log(f"restored as a clone in {secs:.1f} s")
    clone_agent = VirshAgent(lv.uri, "desk-clone1")
    GuestFacts(clone_agent).check_after_restore(before, "clone")
    cid = domain_identity(lv, "desk-clone1")
    for key in ("uuid", "mac", "genid"):
        if cid[key] == ident[key] or not cid[key]:
            raise Fail(f"the clone's {key} {cid[key]} is not a new one (saved domain: {ident[key]})")
    if not poll_until(lambda: guest_macs(clone_agent) == [cid["mac"]], 60, poll=1):
        raise Fail(f"the clone's guest sees NICs {guest_macs(clone_agent)}, not its new MAC {cid['mac']}")
    log(f"clone: new UUID {cid['uuid']}, MAC {cid['mac']} (seen by the guest), genid {cid['genid']}")


def scenario_errors(work, tools):
    # An unknown variant: a usage error before anything is made.
    p = subprocess.run([realguest.BUILD_SCRIPT, "--variant", "laptop"], capture_output=True, text=True)
    if p.returncode != 2 or "unknown variant 'laptop'" not in p.stderr:
        raise Fail(f"--variant laptop: exit {p.returncode}, {p.stderr!r}")
    log(f"unknown variant: exit 2, {p.stderr.strip()}")

    # A package Debian does not have, in a copy of the recipe: named, exit 1, nothing left in the cache.
    if os.geteuid() != 0:
        raise Skip("the build needs root (mmdebstrap's root mode)")
    tree = os.path.join(work, "repo")
    shutil.rmtree(tree, ignore_errors=True)
    os.makedirs(os.path.join(tree, "scripts"))
    shutil.copy(realguest.BUILD_SCRIPT, os.path.join(tree, "scripts"))
    shutil.copytree(os.path.join(REPO, "guest", "desktop"), os.path.join(tree, "guest", "desktop"))
    bogus = "hlt-no-such-package-%d" % os.getpid()
    with open(os.path.join(tree, "guest", "desktop", "image", "packages-minimal.txt"), "a") as f:
        f.write(f"{bogus}\n")
    cache = os.path.join(work, "cache")
    shutil.rmtree(cache, ignore_errors=True)
    start = time.monotonic()
    p = subprocess.run([os.path.join(tree, "scripts", "build-desktop-guest"), "--out", cache], capture_output=True,
                       text=True, timeout=900)
    if p.returncode != 1 or "package(s) not found in" not in p.stderr or bogus not in p.stderr:
        raise Fail(f"a missing package: exit {p.returncode}, expected 1 and a message naming {bogus}:\n"
                   f"{p.stderr[-3000:]}")
    left = sorted(n for n in os.listdir(cache)
                  if not n.startswith(("debs-", ".lock-")) and not n.endswith(".failed.log"))
    if left:
        raise Fail(f"a failed build left {left} in {cache}")
    msg = [line for line in p.stderr.splitlines() if "not found in" in line][0]
    log(f"missing package: exit 1 after {time.monotonic() - start:.1f} s: {msg}; the cache holds only "
        f"{sorted(os.listdir(cache))}")

    # Missing firmware, missing swtpm: named before anything starts.
    image_stub = type("I", (), {"disk": "/nonexistent.qcow2", "variant": realguest.VARIANTS["minimal"]})()
    saved = realguest.FIRMWARE_CODE
    realguest.FIRMWARE_CODE = "/nonexistent/OVMF_CODE_4M.fd"
    try:
        realguest.Instance(work, "nofw", image_stub).prepare()
        raise Fail("prepare() accepted missing firmware")
    except realguest.MissingFile as e:
        if realguest.FIRMWARE_CODE not in str(e) or "ovmf" not in str(e):
            raise Fail(f"the missing firmware message does not name the file and the package: {e}")
        log(f"missing firmware: {e}")
    finally:
        realguest.FIRMWARE_CODE = saved
    old_path = os.environ["PATH"]
    os.environ["PATH"] = tempfile.mkdtemp()
    try:
        realguest.check_swtpm()
        raise Fail("check_swtpm() found swtpm with an empty PATH")
    except realguest.MissingFile as e:
        if "swtpm" not in str(e):
            raise Fail(f"the missing swtpm message does not name it: {e}")
        log(f"missing swtpm: {e}")
    finally:
        os.environ["PATH"] = old_path


SCENARIOS = {"build": scenario_build, "qemu": scenario_qemu, "libvirt": scenario_libvirt, "errors": scenario_errors}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tools", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("scenario", choices=sorted(SCENARIOS))
    a = ap.parse_args()
    # A SIGTERM (ctest's timeout) unwinds through the cleanups: no QEMU or libvirt domain is left behind.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    work = os.path.join(a.work, a.scenario)
    shutil.rmtree(work, ignore_errors=True)  # overlays, NVRAM, checkpoints of an earlier run
    os.makedirs(work)
    # The scenario's directory is its own: its overlays and checkpoints go when it passes, stay when it fails.
    scratch = Scratch(work, whole=True, log=log)
    try:
        SCENARIOS[a.scenario](work, os.path.abspath(a.tools))
    except Skip as e:
        scratch.finish(passed=True)
        skip_loudly(str(e))
    except Fail as e:
        print(f"FAIL ({a.scenario}): {e}", flush=True)
        scratch.finish(passed=False)
        return 1
    log(f"PASS ({a.scenario}) in {time.monotonic() - T0:.1f} s")
    scratch.finish(passed=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
