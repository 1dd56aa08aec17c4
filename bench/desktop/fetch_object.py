#!/usr/bin/python3
"""Downloads one object of the local Ceph to a file, as a user would copy a saved VM down before restoring it, and
then (with --then) runs a command in its place: bench_desktop.py's copy-down baseline (objstore_leg.py).

    fetch_object.py s3 BUCKET KEY DEST [--then CMD ...]      boto3 download_file, 8 MiB parts, 10 in flight
    fetch_object.py rados POOL NAME DEST [--then CMD ...]    every 4 MiB stripe of a rados:// checkpoint-layout
                                                             object, 8 in flight
The store's credentials come from the environment (scripts/ceph-up's env file). Prints the bytes and seconds of
the download. The copy is not fsynced (as `aws s3 cp` does not): the restore then reads it from the page cache.
"""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "objstore"))
import restore_all  # noqa: E402  (bench/objstore's download baselines: the same code times both benches' baselines)


def main():
    argv = sys.argv[1:]
    then = []
    if "--then" in argv:
        i = argv.index("--then")
        argv, then = argv[:i], argv[i + 1:]
    if len(argv) != 4 or argv[0] not in ("s3", "rados"):
        sys.exit(__doc__)
    store, container, name, dest = argv
    t = time.monotonic()
    if store == "s3":
        restore_all.s3_download(os.environ, container, name, dest)
    else:
        restore_all.rados_download(os.environ, container, name, dest)
    print(f"downloaded {os.path.getsize(dest)} bytes of {store} {container}/{name} in "
          f"{time.monotonic() - t:.3f} s", flush=True)
    if then:
        os.execvp(then[0], then)


if __name__ == "__main__":
    main()
