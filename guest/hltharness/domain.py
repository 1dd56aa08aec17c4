"""The libvirt domain of the real Debian guest: guest/desktop/domain.xml with its placeholders filled in.

    xml = domain.render(name="desk", image=image, disk=overlay, nvram=nvram_path, serial_log=log, tpm=False)

Every value is XML-escaped; a placeholder left unfilled or a value missing is an error (ValueError naming it).
"""

import os
import re
from xml.sax.saxutils import escape

from . import realguest

TEMPLATE = os.path.join(realguest.REPO, "guest", "desktop", "domain.xml")
_PLACEHOLDER = re.compile(r"@([A-Z_]+)@")
_TPM_BLOCK = re.compile(r"<!--@TPM-BEGIN@-->\n(.*?)<!--@TPM-END@-->\n", re.S)
_QMP_BLOCK = re.compile(r"<!--@QMP-BEGIN@-->\n(.*?)<!--@QMP-END@-->\n", re.S)


def render(name, image, disk, nvram, serial_log, tpm=False, mac="52:54:00:48:4c:01", qmp_socket=None,
           template=TEMPLATE):
    """The domain XML for `image` (a realguest.GuestImage) booting from `disk` (normally an overlay on
    image.disk) with its NVRAM at `nvram` (libvirt copies OVMF_VARS there when it does not exist). With
    `qmp_socket`, QEMU also serves a QMP monitor of the harness's own there (libvirt taints the domain
    "custom-argv"): screendumps and keys that need no libvirt, e.g. while hlt-restore holds the embedded driver.
    QEMU replaces the socket file when it starts, so every clone of a saved domain listens on the same path: a
    harness renames each clone's socket before it starts the next one."""
    realguest.check_firmware()
    if tpm:
        realguest.check_swtpm()
    values = {
        "NAME": name,
        "MEMORY_MIB": str(image.variant.mem_mib),
        "VCPUS": str(image.variant.vcpus),
        "CPU_MODEL": realguest.CPU_MODEL,
        "LOADER": realguest.FIRMWARE_CODE,
        "NVRAM_TEMPLATE": realguest.FIRMWARE_VARS,
        "NVRAM": nvram,
        "EMULATOR": realguest.qemu_binary(),
        "DISK": disk,
        "MAC": mac,
        "SERIAL_LOG": serial_log,
        "QMP_SOCKET": qmp_socket or "",
    }
    with open(template) as f:
        text = f.read()
    text = _TPM_BLOCK.sub(lambda m: m.group(1) if tpm else "", text)
    text = _QMP_BLOCK.sub(lambda m: m.group(1) if qmp_socket else "", text)

    def fill(m):
        key = m.group(1)
        if key not in values:
            raise ValueError(f"{template}: placeholder @{key}@ has no value")
        return escape(values[key], {"'": "&apos;", '"': "&quot;"})

    return _PLACEHOLDER.sub(fill, text)
