#!/usr/bin/env python3
"""A plain HTTP server that misbehaves on purpose, for the tests of `http://` data roots
(tests/tests/object_store_http.rs). It serves the files of --dir by name (HEAD and ranged
GET, with ETag and Last-Modified) and logs every request line to --log, except that:

- `redirect*`: every request is answered 302 to --redirect-to;
- `redirect-get*`: HEAD is answered, a GET gets 302 to --redirect-to;
- `norange*`: a ranged GET is answered 200 with the whole file (Range ignored);
- `long*`: a ranged GET is answered 206 for the range asked, with a body of --long-bytes
  bytes (zeros, sent until the client goes away).

It prints `listening on PORT` once bound (port 0 picks one) and serves until killed.
"""

import argparse
import email.utils
import http.server
import os
import re
import sys


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dir", required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--redirect-to", default="")
    parser.add_argument("--long-bytes", type=int, default=1 << 30)
    args = parser.parse_args()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format, *log_args):
            pass

        def log_request_line(self):
            with open(args.log, "a") as log:
                log.write(f"{self.command} {self.path}\n")

        def send_plain(self, status, headers, body=b""):
            self.send_response(status)
            for name, value in headers:
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def do_HEAD(self):
            self.answer()

        def do_GET(self):
            self.answer()

        def answer(self):
            self.log_request_line()
            name = self.path.lstrip("/")
            base = os.path.basename(name)
            if base.startswith("redirect-get"):
                if self.command == "GET":
                    return self.send_plain(302, [("Location", args.redirect_to)])
            elif base.startswith("redirect"):
                return self.send_plain(302, [("Location", args.redirect_to)])
            path = os.path.join(args.dir, name)
            if not os.path.isfile(path):
                return self.send_plain(404, [], b"not found")
            with open(path, "rb") as f:
                data = f.read()
            stat = os.stat(path)
            headers = [
                ("ETag", f'"{stat.st_size}-{int(stat.st_mtime)}"'),
                ("Last-Modified", email.utils.formatdate(stat.st_mtime, usegmt=True)),
                ("Accept-Ranges", "bytes"),
            ]
            wanted = re.fullmatch(r"bytes=(\d+)-(\d+)", self.headers.get("Range", ""))
            if self.command == "HEAD" or not wanted or base.startswith("norange"):
                return self.send_plain(200, headers, data)
            start, end = int(wanted.group(1)), min(int(wanted.group(2)), len(data) - 1)
            headers.append(("Content-Range", f"bytes {start}-{end}/{len(data)}"))
            if not base.startswith("long"):
                return self.send_plain(206, headers, data[start : end + 1])
            self.close_connection = True
            self.send_response(206)
            for header, value in headers:
                self.send_header(header, value)
            self.send_header("Content-Length", str(args.long_bytes))
            self.send_header("Connection", "close")
            self.end_headers()
            chunk = bytes(1 << 20)
            left = args.long_bytes
            try:
                while left > 0:
                    n = min(left, len(chunk))
                    self.wfile.write(chunk[:n])
                    left -= n
            except (BrokenPipeError, ConnectionResetError):
                pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    print(f"listening on {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
