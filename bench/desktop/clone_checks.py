"""Issue 27 item 5: is each clone right inside its OS? Asked through the clone's own guest agent channel (libvirt's
qemu-agent-command) and its domain XML; each check is a (name, ok, detail) row.

What the guest is asked (one shell script, one guest-exec): its NICs' MACs, the clock, what the kernel logged
about a VM generation ID or an RNG reseed, the ACPI GPE counters (QEMU's vmgenid device signals a new ID with a
GPE; the kernel's vmgenid driver then reseeds the RNG and logs "crng reseeded due to virtual machine fork"),
whether the vmgenid driver is bound, the TPM's PCRs 0 and 7.
"""

import os
import re
import socket
import threading
import time

from hltharness.qga import AgentError, VirshAgent

GUEST_FACTS = (
    "echo token=$(cat /run/hlt-clone-token 2>/dev/null); "
    "echo tpm_pcrs=$(cat /sys/class/tpm/tpm0/pcr-sha256/0 /sys/class/tpm/tpm0/pcr-sha256/7 2>/dev/null | tr '\\n' ' '); "
    "echo vmgenid_driver=$(ls /sys/bus/acpi/drivers/vmgenid 2>/dev/null | grep -c : ); "
    "echo vmgenid_config=$(grep -h '^CONFIG_VMGENID' /boot/config-$(uname -r) 2>/dev/null); "
    "echo gpe=$(for f in /sys/firmware/acpi/interrupts/gpe[0-9A-F][0-9A-F]; do n=$(awk '{print $1}' $f); "
    "[ \"$n\" != 0 ] && echo -n \"${f##*/}:$n \"; done); "
    "echo sci=$(awk '{print $1}' /sys/firmware/acpi/interrupts/sci 2>/dev/null); "
    "echo dmesg_genid=$(dmesg | grep -iE 'vmgenid|virtual machine fork|crng reseed|generation' | tail -n 3 | "
    "tr '\\n' '|'); "
    "echo boot_id=$(cat /proc/sys/kernel/random/boot_id)")


def guest_facts(agent):
    r = agent.shell(GUEST_FACTS, timeout=180)  # several desktops on 2 loaded cores: a script can take a minute
    return dict(line.split("=", 1) for line in r.stdout.splitlines() if "=" in line)


def guest_macs(agent):
    return sorted(i.get("hardware-address") for i in agent.command("guest-network-get-interfaces")
                  if i.get("name") != "lo")


class HostClock:
    """A TCP server on the host's loopback that answers every connection with the host's time (time.time()). The
    guest reaches it at 10.0.2.2 (QEMU's user network forwards there to the host's 127.0.0.1), so the guest can
    compare its clock with the host's within one local round trip, however slow the agent channel is."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.sendall(f"{time.time():.6f}\n".encode())


HOST_CLOCK = None


def clock_offset_s(agent):
    """Guest clock minus host clock (seconds): the guest reads its clock, the host's through HostClock, and its
    clock again (one script in the guest); the offset is the middle of the two guest readings minus the host's."""
    global HOST_CLOCK
    if HOST_CLOCK is None:
        HOST_CLOCK = HostClock()
    r = agent.shell("t0=$(date +%s.%N); h=$(timeout 10 bash -c 'exec 3<>/dev/tcp/10.0.2.2/"
                    f"{HOST_CLOCK.port}; cat <&3'); t1=$(date +%s.%N); echo \"$t0 $h $t1\"", timeout=180)
    try:
        t0, host, t1 = (float(x) for x in r.stdout.split())
    except ValueError:
        raise AgentError(f"the guest could not read the host's clock: {r.stdout!r} {r.stderr!r}")
    return (t0 + t1) / 2 - host


def domain_facts(lv, name):
    xml = lv.virsh("dumpxml", name)
    nvram = re.search(r"<nvram[^>]*>([^<]+)</nvram>", xml)
    agent_path = re.search(r"<channel type='unix'>\s*<source mode='bind' path='([^']+)'", xml)
    genid = re.search(r"<genid>([^<]+)</genid>", xml)
    return {"uuid": re.search(r"<uuid>([^<]+)</uuid>", xml).group(1),
            "mac": re.search(r"<mac address='([^']+)'", xml).group(1),
            "genid": genid.group(1) if genid else None,
            "nvram": nvram.group(1) if nvram else None,
            "agent_socket": agent_path.group(1) if agent_path else None}


def write_tokens(lv, names):
    """Each clone gets a token of its own through its own agent channel."""
    for name in names:
        VirshAgent(lv.uri, name, reconnect_wait=10).shell(f"echo tok-{name} > /run/hlt-clone-token", timeout=180)


def check_clone(lv, name, source, saved_nvram, swtpm_dir, screen_ok, tpm):
    """Rows for one clone. `source`: the saved domain's facts (domain_facts + guest_facts + macs before the save)."""
    rows = []
    add = lambda what, ok, detail: rows.append({"clone": name, "check": what, "ok": bool(ok), "detail": detail})  # noqa
    agent = VirshAgent(lv.uri, name, reconnect_wait=10)  # libvirt's agent reconnection is slow on a loaded host
    try:
        dom = domain_facts(lv, name)
        facts = guest_facts(agent)
        macs = guest_macs(agent)
        offset = clock_offset_s(agent)
        time.sleep(5)
        offset_later = clock_offset_s(agent)  # a constant offset (the sync was late) or a drift (the clock's rate)
    except AgentError as e:
        add("agent answers", False, str(e))
        return rows
    add("agent on its own channel",
        facts.get("token") == f"tok-{name}" and dom["agent_socket"] != source["agent_socket"],
        f"token {facts.get('token')!r} through {dom['agent_socket']}")
    add("new MAC seen by the guest", macs == [dom["mac"]] and dom["mac"] != source["mac"],
        f"guest {macs}, domain {dom['mac']}, saved {source['mac']}")
    add("new UUID and genid", dom["uuid"] != source["uuid"] and dom["genid"] and dom["genid"] != source["genid"],
        f"uuid {dom['uuid']}, genid {dom['genid']} (saved {source['genid']})")
    add("same boot (restored, not rebooted)", facts.get("boot_id") == source["boot_id"], facts.get("boot_id"))
    same = False
    if dom["nvram"] and os.path.exists(dom["nvram"]):
        with open(dom["nvram"], "rb") as f:
            same = f.read() == saved_nvram
    add("NVRAM its own copy of the saved one", same and dom["nvram"] != source["nvram"], str(dom["nvram"]))
    if tpm:
        state = os.path.join(swtpm_dir, dom["uuid"])
        add("TPM state its own copy", os.path.isdir(state) and facts.get("tpm_pcrs") == source["tpm_pcrs"]
            and facts.get("tpm_pcrs", "").strip() != "",
            f"{state}; PCR 0,7 {facts.get('tpm_pcrs')!r} (saved {source['tpm_pcrs']!r})")
    add("screen shows the session", screen_ok[0], screen_ok[1])
    add("clock right (|guest - host| < 1 s)", abs(offset) < 1.0,
        f"guest - host = {offset:+.3f} s, 5 s later {offset_later:+.3f} s")
    gpe_before, gpe_after = source.get("gpe", ""), facts.get("gpe", "")
    reseeded = "virtual machine fork" in facts.get("dmesg_genid", "") or "crng reseed" in facts.get("dmesg_genid", "")
    add("kernel logged the generation-ID change (RNG reseed)", reseeded,
        f"dmesg: {facts.get('dmesg_genid')!r}; vmgenid driver bound: {facts.get('vmgenid_driver')}, "
        f"{facts.get('vmgenid_config')}; GPE counts before the save {gpe_before!r}, in the clone {gpe_after!r}; "
        f"SCI {source.get('sci')} -> {facts.get('sci')}")
    return rows
