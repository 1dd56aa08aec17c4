"""Every page in: restores from s3:// and rados:// against a plain parallel download of the same object and against
the local file, in one run (issue 28 item 7). bench_objstore.py --restore-all runs it.

Per run, in turn: a plain download of the checkpoint object (S3: boto3's download_file, 8 MiB parts, 10 in flight,
as a user would fetch it; RADOS: every stripe object read with rados aio, 8 in flight), then `hlt-restore replay
--json` of a short random trace (so that demand faults come while the blocks stream) from the local file (page
cache dropped first: cold), from s3:// and from rados:// (no block cache: every block from the store):
  eager   --eager: every block loaded before the first access; time = start_seconds
  lazy    loader on, --wait-loader: the guest runs at once; time = loader_done_seconds (every block in)
The goal: from the object store, time <= 1.3 x the local-file time + the download time of the same run.
"""
import concurrent.futures
import os
import statistics
import subprocess
import sys
import time


def s3_download(env, bucket, key, dest):
    try:
        import boto3
        from boto3.s3.transfer import TransferConfig
    except ImportError:
        sys.exit("restore_all: the S3 download baseline needs boto3 (python3-boto3 of scripts/install-deps --bench; "
                 "run this with the system python3)")
    s3 = boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], region_name=env.get("AWS_REGION", "us-east-1"),
                      aws_access_key_id=env["AWS_ACCESS_KEY_ID"], aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"])
    t0 = time.time()
    s3.download_file(bucket, key, dest, Config=TransferConfig(multipart_chunksize=8 << 20, max_concurrency=10))
    return time.time() - t0


def rados_download(env, pool, name, dest, in_flight=8):
    try:
        import rados
    except ImportError:
        sys.exit("restore_all: the RADOS download baseline needs python3-rados (scripts/install-deps --bench; "
                 "run this with the system python3)")
    cluster = rados.Rados(conffile=env["CEPH_CONF"])
    cluster.connect()
    try:
        io = cluster.open_ioctx(pool)
        t0 = time.time()
        head = io.read(name, 4096).decode()
        fields = dict(line.split(" ", 1) for line in head.splitlines()[1:] if " " in line)
        stripe, length, prefix = int(fields["stripe_size"]), int(fields["length"]), fields["prefix"].strip()
        fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)

        def get(i):
            n = min(stripe, length - i * stripe)
            data = io.read(f"{prefix}.{i:08x}", n)
            os.pwrite(fd, data, i * stripe)
            return len(data)
        with concurrent.futures.ThreadPoolExecutor(in_flight) as pool_:
            got = sum(pool_.map(get, range((length + stripe - 1) // stripe)))
        os.close(fd)
        if got != length:
            sys.exit(f"restore_all: rados download got {got} of {length} bytes")
        return time.time() - t0
    finally:
        cluster.shutdown()


def replay_time(replay, tools, uri, trace, env, mode):
    extra = ["--eager"] if mode == "eager" else ["--wait-loader"]
    r = replay(tools, uri, trace, env, extra)
    r["all_in_seconds"] = r["start_seconds"] if mode == "eager" else r["loader_done_seconds"]
    return r


def run(a, env, tmp, replay, drop_caches):
    img = os.path.join(tmp, "img")
    subprocess.run([a.mkimage, img, str(a.mib), "7"], check=True, stdout=subprocess.DEVNULL)
    pages = a.mib * 256
    import random
    rng = random.Random(3)
    trace = os.path.join(tmp, "trace")
    with open(trace, "w") as f:
        f.write("\n".join(str(rng.randrange(pages)) for _ in range(a.accesses)) + "\n")
    tag = f"bench-all-{os.getpid()}"
    local = os.path.join(tmp, "c.hlt")
    bucket, pool = env["HALITE_TEST_S3_BUCKET"], env["HALITE_TEST_RADOS_POOL"]
    uris = {"local": local, "s3": f"s3://{bucket}/{tag}.hlt", "rados": f"rados://{pool}/{tag}"}
    for uri in uris.values():
        subprocess.run([f"{a.tools}/hlt-save", "raw", img, "-o", uri, "--no-sync"], env=env, check=True,
                       stdout=subprocess.DEVNULL)
    os.unlink(img)
    size = os.path.getsize(local)
    info = subprocess.run([f"{a.tools}/hlt-restore", "info", local, "--json"], capture_output=True, text=True,
                          check=True).stdout
    blocks = __import__("json").loads(info).get("blocks", "?")
    rows = []
    dest = os.path.join(tmp, "download")
    for run_ in range(a.runs):
        rows.append({"case": "download s3", "run": run_, "all_in_seconds": s3_download(env, bucket, f"{tag}.hlt", dest)})
        rows.append({"case": "download rados", "run": run_, "all_in_seconds": rados_download(env, pool, tag, dest)})
        os.unlink(dest)
        cases = [(mode, store, a.tools, "") for mode in ("eager", "lazy") for store in ("local", "s3", "rados")]
        if a.baseline_tools:  # eager only: an older build may lack --wait-loader
            cases += [("eager", store, a.baseline_tools, " (baseline build)") for store in ("local", "s3", "rados")]
        for mode, store, tools, suffix in cases:
            if store == "local":
                drop_caches()
            r = replay_time(replay, tools, uris[store], trace, env, mode)
            rows.append({"case": f"{mode} {store}{suffix}", "run": run_, **{k: r.get(k, "") for k in (
                "all_in_seconds", "seconds", "faults_blocking", "blocking_p50_us", "blocking_p99_us",
                "stall_seconds", "storage_requests", "storage_bytes", "preload_batches", "loader_batches",
                "blocks_read_demand", "mismatches")}})
    med = {}
    for name in dict.fromkeys(r["case"] for r in rows):
        med[name] = statistics.median(r["all_in_seconds"] for r in rows if r["case"] == name)
    print(f"\nEvery page in: {a.mib} MiB image (hlt-mkimage seed 7), checkpoint {size / 2**20:.0f} MiB, "
          f"{blocks} blocks; {a.accesses} random accesses during the restore; median of {a.runs} runs (s)")
    print("| restore | local file | s3 | s3 goal (1.3 x local + download) | s3 vs goal | rados | rados goal | "
          "rados vs goal | s3 requests | rados requests | s3 blocking p99 ms |")
    print("|" + " --- |" * 11)
    modes = ["eager", "lazy"] + (["eager (baseline build)"] if a.baseline_tools else [])
    for mode in modes:
        kind, _, suffix = mode.partition(" ")
        suffix = " " + suffix if suffix else ""
        loc = med[f"{kind} local{suffix}"]
        goal = {s: 1.3 * loc + med[f"download {s}"] for s in ("s3", "rados")}

        def case(store):
            return f"{kind} {store}{suffix}"

        def req(store):
            return statistics.median(r["storage_requests"] for r in rows if r["case"] == case(store))
        p99 = statistics.median(r["blocking_p99_us"] for r in rows if r["case"] == case("s3")) / 1000
        print(f"| {mode} | {loc:.2f} | {med[case('s3')]:.2f} | {goal['s3']:.2f} | "
              f"{med[case('s3')] / goal['s3']:.2f}x | {med[case('rados')]:.2f} | {goal['rados']:.2f} | "
              f"{med[case('rados')] / goal['rados']:.2f}x | {req('s3'):.0f} | {req('rados'):.0f} | {p99:.2f} |")
    print(f"plain download: s3 {med['download s3']:.2f} s, rados {med['download rados']:.2f} s "
          f"({size / 2**20 / med['download s3']:.0f} / {size / 2**20 / med['download rados']:.0f} MiB/s)")
    if any(r.get("mismatches") for r in rows):
        sys.exit("MISMATCH: a replay saw a wrong page")
    return rows, {"checkpoint_bytes": size, "blocks": blocks, "medians": med}
