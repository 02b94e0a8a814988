"""An application behind proto-gate, written with Python's standard library only.

It trusts the gate's identity headers (it listens on loopback only) and echoes, as JSON, what it
received: method, path, every Proto-Gate-* and X-Forwarded-* header, and the body's length and
SHA-256. GET /sse answers a server-sent event stream of five events.

    python3 echo_app.py PORT
"""
import hashlib
import json
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def read_body(handler):
    if handler.headers.get("Transfer-Encoding", "").lower() == "chunked":
        digest, total = hashlib.sha256(), 0
        while True:
            size = int(handler.rfile.readline().split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while handler.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass
                return digest.hexdigest(), total
            remaining = size
            while remaining:
                chunk = handler.rfile.read(min(remaining, 65536))
                digest.update(chunk)
                remaining -= len(chunk)
            total += size
            handler.rfile.readline()
    length = int(handler.headers.get("Content-Length") or 0)
    digest, remaining = hashlib.sha256(), length
    while remaining:
        chunk = handler.rfile.read(min(remaining, 65536))
        if not chunk:
            break
        digest.update(chunk)
        remaining -= len(chunk)
    return digest.hexdigest(), length


class Echo(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def answer(self):
        if self.path == "/sse":
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-store")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for i in range(5):
                event = f"id: {i}\ndata: event {i}\n\n".encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
                self.wfile.flush()
                time.sleep(0.02)
            self.wfile.write(b"0\r\n\r\n")
            return
        sha256, length = read_body(self)
        seen = {
            name.lower(): value
            for name, value in self.headers.items()
            if name.lower().startswith(("proto-gate-", "x-forwarded-"))
        }
        body = json.dumps(
            {"method": self.command, "path": self.path, "headers": seen, "body": {"length": length, "sha256": sha256}}
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Echo-App", "python")
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = answer


if __name__ == "__main__":
    server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Echo)
    server.daemon_threads = True
    print("listening", flush=True)
    server.serve_forever()
