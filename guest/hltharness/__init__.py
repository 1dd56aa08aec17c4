"""The project's Python harness for guests: import it with sys.path holding <repo>/guest.

    qmp        QMP client (commands, events with QEMU's timestamps)
    qga        the QEMU guest agent, through QEMU's socket or through libvirt
    screen     the desktop page's two counters read from a screendump (no OCR)
    realguest  the real Debian guest (scripts/build-desktop-guest): image, QEMU machine, boot, waits
    domain     its libvirt domain (guest/desktop/domain.xml filled in)
    libvirt    a libvirt of the harness's own (the embedded QEMU driver under a private root) and virsh

guest/launch.py stays the one definition of the small test guest's machine (kernel + busybox initramfs).
"""
