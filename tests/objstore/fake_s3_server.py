#!/usr/bin/env python3
"""A stand-in S3 server for the client's failure paths (no Ceph needed): serves one local file as every object,
with HEAD and ranged GET, and answers with injected failures. Signatures are not checked.

    fake_s3_server.py FILE PORT_FILE LOG_FILE MODE
MODE: "flaky" answers 503 to the first GET of each range and serves the retry; "forbidden" answers 403 to every GET
after the first two (the footer and index reads at open). Every request is appended to LOG_FILE as
"METHOD STATUS RANGE". The chosen port is written to PORT_FILE.
"""
import http.server
import os
import sys
import threading

path, port_file, log_file, mode = sys.argv[1:5]
data = open(path, "rb").read()
lock = threading.Lock()
gets = 0
seen = set()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def record(self, status):
        with open(log_file, "a") as f:
            f.write(f"{self.command} {status} {self.headers.get('Range', '-')}\n")

    def do_HEAD(self):
        self.record(200)
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()

    def do_GET(self):
        global gets
        with lock:
            gets += 1
            n = gets
            first_time = self.headers["Range"] not in seen
            seen.add(self.headers["Range"])
        fail = (mode == "flaky" and first_time) or (mode == "forbidden" and n > 2)
        if fail:
            status = 503 if mode == "flaky" else 403
            body = f"<Error><Code>{'SlowDown' if status == 503 else 'AccessDenied'}</Code></Error>".encode()
            self.record(status)
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        first, last = self.headers["Range"].split("=")[1].split("-")
        if first == "":  # a suffix range: the last N bytes
            first, last = max(0, len(data) - int(last)), len(data) - 1
        chunk = data[int(first):int(last) + 1]
        self.record(206)
        self.send_response(206)
        self.send_header("Content-Length", str(len(chunk)))
        self.send_header("Content-Range", f"bytes {first}-{last}/{len(data)}")
        self.end_headers()
        self.wfile.write(chunk)


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
with open(port_file + ".tmp", "w") as f:
    f.write(str(server.server_address[1]))
os.rename(port_file + ".tmp", port_file)
server.serve_forever()
