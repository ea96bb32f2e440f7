#!/usr/bin/env python3
"""Serve examples/web (the page and its pkg/) on localhost.

Usage: python3 examples/web/serve.py [PORT]   (default 8000)

Python's standard library only; .wasm goes out as application/wasm, which
WebAssembly.instantiateStreaming needs.
"""

import functools
import http.server
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


class Handler(http.server.SimpleHTTPRequestHandler):
    extensions_map = {
        **http.server.SimpleHTTPRequestHandler.extensions_map,
        ".wasm": "application/wasm",
        ".js": "text/javascript",
        ".html": "text/html; charset=utf-8",
    }

    def end_headers(self):
        # Always the freshly built module.
        self.send_header("Cache-Control", "no-store")
        super().end_headers()

    def log_message(self, fmt, *args):
        if os.environ.get("SERVE_QUIET") != "1":
            super().log_message(fmt, *args)


def make_server(port, host="127.0.0.1"):
    """An HTTP server for examples/web on `port` (0 picks a free one)."""
    handler = functools.partial(Handler, directory=HERE)
    return http.server.ThreadingHTTPServer((host, port), handler)


def main():
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 8000
    server = make_server(port)
    if not os.path.exists(os.path.join(HERE, "pkg", "web.js")):
        print("note: pkg/web.js is missing: run examples/web/build.sh first", file=sys.stderr)
    print(f"serving {HERE} at http://localhost:{server.server_address[1]}/", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
