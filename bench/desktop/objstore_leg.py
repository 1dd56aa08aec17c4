"""The object-store leg of bench_desktop.py (issue 27's goal "from s3:// on the local Ceph: at least 3x sooner to
interactive than `virsh restore` of a file copied down from the same store").

The halite checkpoint and virsh's save file are put into the local single-node Ceph (scripts/ceph-up, or a cluster
given by --ceph-env) byte for byte: into the S3 bucket as objects, and into the RADOS pool in the layout
`rados://POOL/NAME` reads (4 MiB stripes PREFIX.00000000..., then the head object NAME; see
libhalite/src/objstore/rados_storage.cc). Then, per store:

  virsh-restore-STORE    a plain parallel download of virsh's save file (fetch_object.py: S3 with boto3, 8 MiB
                         parts, 10 in flight; RADOS every stripe, 8 in flight, as bench/objstore times its
                         baseline), then `virsh restore` of it; timed from the download's start
  hlt-lazy-halite-STORE  hlt-restore libvirt STORE://... --block-cache DIR (a fresh, empty cache each run)
"""

import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
STRIPE = 4 << 20


def load_env(path):
    env = {}
    with open(path) as f:
        for line in f:
            if line.startswith("export "):
                k, v = line[len("export "):].strip().split("=", 1)
                env[k] = v
    return env


class Cluster:
    """A Ceph of the bench's own (scripts/ceph-up DIR), or one given by its env file; its variables are put into
    os.environ so that every command the bench runs (hlt-restore, the downloads) finds the store."""

    def __init__(self, env_file=None, ceph_dir=None):
        self.dir = None
        if env_file is None:
            self.dir = ceph_dir
            t = time.monotonic()
            subprocess.run([os.path.join(REPO, "scripts", "ceph-up"), ceph_dir], check=True)
            self.up_s = time.monotonic() - t
            env_file = os.path.join(ceph_dir, "env")
        self.env = load_env(env_file)
        os.environ.update(self.env)
        self.bucket = self.env["HALITE_TEST_S3_BUCKET"]
        self.pool = self.env["HALITE_TEST_RADOS_POOL"]

    def stop(self):
        if self.dir:
            subprocess.run([os.path.join(REPO, "scripts", "ceph-down"), self.dir])
            self.dir = None

    def uri(self, store, name):
        return f"s3://{self.bucket}/{name}" if store == "s3" else f"rados://{self.pool}/{name}"

    def put(self, store, path, name):
        """Puts the file `path` into the store as `name`; returns seconds taken."""
        t = time.monotonic()
        if store == "s3":
            self._s3().upload_file(path, self.bucket, name, Config=_transfer_config())
        else:
            self._rados_put(path, name)
        return time.monotonic() - t

    def _s3(self):
        import boto3
        return boto3.client("s3", endpoint_url=self.env["AWS_ENDPOINT_URL"],
                            region_name=self.env.get("AWS_REGION", "us-east-1"),
                            aws_access_key_id=self.env["AWS_ACCESS_KEY_ID"],
                            aws_secret_access_key=self.env["AWS_SECRET_ACCESS_KEY"])

    def _rados_put(self, path, name):
        import rados
        cluster = rados.Rados(conffile=self.env["CEPH_CONF"])
        cluster.connect()
        try:
            io = cluster.open_ioctx(self.pool)
            prefix = f"{name}.s.{os.getpid():016x}"
            length = os.path.getsize(path)
            with open(path, "rb") as f:
                for i in range((length + STRIPE - 1) // STRIPE):
                    io.write_full(f"{prefix}.{i:08x}", f.read(STRIPE))
            io.write_full(name, (f"halite-rados-stripes 1\nstripe_size {STRIPE}\nlength {length}\n"
                                 f"prefix {prefix}\n").encode())
        finally:
            cluster.shutdown()


def _transfer_config():
    from boto3.s3.transfer import TransferConfig
    return TransferConfig(multipart_chunksize=8 << 20, max_concurrency=10)


def baseline_argv(store, bucket_or_pool, name, dest, uri):
    """The copy-down baseline as one command (timed as a whole by measure.restore_run): the download, then
    `virsh restore` of the copy."""
    fetch = [sys.executable, os.path.join(HERE, "fetch_object.py"), store, bucket_or_pool, name, dest]
    virsh = ["virsh", "-q", "-c", uri, "restore", dest, "--running"]
    return [*fetch, "--then", *virsh]
