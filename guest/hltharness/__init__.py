"""The project's Python harness for guest tests and benchmarks: import it with sys.path holding <repo>/guest.

    wait       the clock seam: wait for a condition (a file, a log line, a status-file field) with a deadline
    proc       start/run/stop processes; zombie-aware liveness (this machine's PID 1 does not reap)
    scratch    a test's outputs: large ones removed when it passes, kept (and listed) when it fails
    guesttest  Skip/Fail, log lines, memcheck's output, running one scenario
    qmp        QMP client (commands, events with QEMU's timestamps)
    qga        the QEMU guest agent, through QEMU's socket or through libvirt
    screen     the desktop page's two counters read from a screendump (no OCR)
    realguest  the real Debian guest (scripts/build-desktop-guest): image, QEMU machine, boot, waits
    domain     its libvirt domain (guest/desktop/domain.xml filled in)
    libvirt    a libvirt of the harness's own (the embedded QEMU driver under a private root) and virsh

Tests and bench/ both import from here; bench/ imports no test file. guest/launch.py stays the one definition
of the small test guest's machine (kernel + busybox initramfs).
"""
