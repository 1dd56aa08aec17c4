"""hlt-restore --eager: every page in before the guest runs, directly or through QEMU's stream.
"""


from qemu_guest_common import check_eager
from hltharness.guesttest import Fail  # noqa: E402


def scenario_eager(env):
    # --placement auto: the pages go straight into QEMU's memory through its userfaultfd, the guest held paused
    # until the last one is in.
    ckpt, last = env.stopped_checkpoint()
    rc, out, err, serial = env.restore(ckpt, "eager", ["--eager"])
    if rc != 0:
        raise Fail(f"hlt-restore qemu --eager exited {rc}")
    check_eager(env.path("eager.stats.json"), out, "direct")
    env.expect_continues(serial, last)


def scenario_eager_channel(env):
    # The fallback: a precopy load in QEMU's migration stream, zero pages included.
    ckpt, last = env.stopped_checkpoint()
    rc, out, err, serial = env.restore(ckpt, "eager-channel", ["--eager", "--placement", "channel"])
    if rc != 0:
        raise Fail(f"hlt-restore qemu --eager --placement channel exited {rc}")
    st = check_eager(env.path("eager-channel.stats.json"), out, "channel")
    if st["requests"] != 0:
        raise Fail(f"a precopy load has no page requests, got {st['requests']}")
    env.expect_continues(serial, last)
