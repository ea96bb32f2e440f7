#!/usr/bin/env python3
"""Run the browser demo in headless Chromium and save a screenshot of it.

Usage: python3 examples/web/screenshot.py [OUT.png] [--timeout S] [--width W] [--query Q]
(default docs/web-demo.png, 600 s, 1100 px; --query e.g. "steps=20").

Build first (examples/web/build.sh). Python's standard library only: the page
is served from a thread, chromedriver ($CHROMEDRIVER, default
/usr/bin/chromedriver; $CHROME picks the browser) is driven over W3C WebDriver, and Chromium gets
WebGPU through SwiftShader. Waits for document.body.dataset.done, prints the
page's summary, and exits non-zero if the page failed or timed out.
"""

import argparse
import base64
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import serve  # noqa: E402

CHROME_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--enable-unsafe-webgpu",
    "--enable-unsafe-swiftshader",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
    "--no-first-run",
    "--hide-scrollbars",
    "--force-device-scale-factor=1",
]

# What the page shows, for the terminal.
SUMMARY_JS = """
const t = (id) => (document.getElementById(id) || {}).innerText || "";
return {done: document.body.dataset.done || "", verdict: document.body.dataset.verdict || "",
        status: t("status"), error: t("error"), adapter: t("adapter"), parity: t("parity-verdict"),
        train: t("train-stats"), comm: t("comm-table"), sample: t("sample"),
        sampleStats: t("sample-stats"), quant: t("quant-table"), quantVerdict: t("quant-verdict"),
        summary: t("summary"),
        height: document.documentElement.scrollHeight,
        chrome: window.outerHeight - window.innerHeight};
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class WebDriver:
    """The few W3C WebDriver commands this needs."""

    def __init__(self, port):
        self.base = f"http://127.0.0.1:{port}"
        self.session = None

    def call(self, method, path, body=None, timeout=60):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return json.load(r)["value"]
        except urllib.error.HTTPError as e:
            raise RuntimeError(f"{method} {path}: {e.code} {e.read().decode(errors='replace')[:500]}")

    def wait_ready(self, proc, timeout=20):
        end = time.time() + timeout
        while time.time() < end:
            if proc.poll() is not None:
                raise RuntimeError(f"chromedriver exited with {proc.returncode}")
            try:
                if self.call("GET", "/status", timeout=2).get("ready"):
                    return
            except (OSError, RuntimeError):
                pass
            time.sleep(0.2)
        raise RuntimeError("chromedriver did not become ready")

    def start(self, args):
        options = {"args": args}
        if os.environ.get("CHROME"):
            options["binary"] = os.environ["CHROME"]
        caps = {"capabilities": {"alwaysMatch": {
            "browserName": "chrome", "goog:chromeOptions": options}}}
        self.session = self.call("POST", "/session", caps, timeout=120)["sessionId"]

    def s(self, method, path, body=None, timeout=60):
        return self.call(method, f"/session/{self.session}{path}", body, timeout)

    def script(self, js):
        return self.s("POST", "/execute/sync", {"script": js, "args": []})

    def quit(self):
        if self.session:
            try:
                self.call("DELETE", f"/session/{self.session}", timeout=30)
            except (OSError, RuntimeError) as e:
                print(f"warning: deleting the session: {e}", file=sys.stderr)
            self.session = None


def report(page):
    print(f"adapter:  {page['adapter']}")
    print(f"parity:   {page['parity']}")
    print(f"training: {page['train']}")
    print("comm per training step:")
    for line in page["comm"].splitlines():
        print("  " + line.replace("\t", "  |  "))
    print(f"sample:   {page['sample']}")
    print(f"          {page['sampleStats']}")
    print("quantized (weights | bytes | logits vs f32 | same as f32 | ms/char | greedy):")
    for line in page["quant"].splitlines():
        print("  " + line.replace("\t", "  |  "))
    print(f"          {page['quantVerdict']}")
    print(f"result:   {page['summary']}")


def run(opts, driver):
    width = opts.width
    driver.start(CHROME_ARGS + [f"--window-size={width},1600", f"--user-data-dir={opts.profile}"])
    url = f"http://127.0.0.1:{opts.port}/index.html" + (f"?{opts.query}" if opts.query else "")
    print(f"loading {url}", flush=True)
    started = time.time()
    driver.s("POST", "/url", {"url": url}, timeout=120)
    last = ""
    while True:
        page = driver.script(SUMMARY_JS)
        if page["status"] != last:
            last = page["status"]
            print(f"  [{time.time() - started:6.1f} s] {last}", flush=True)
        if page["done"] == "1":
            break
        if page["done"] == "error":
            report(page)
            raise RuntimeError(f"the page failed: {page['error']}")
        if time.time() - started > opts.timeout:
            report(page)
            raise RuntimeError(f"timed out after {opts.timeout} s")
        time.sleep(0.5)
    elapsed = time.time() - started
    # The whole page in one shot: make the window as tall as the document.
    height = page["height"] + max(page["chrome"], 0)
    driver.s("POST", "/window/rect", {"width": width, "height": height})
    time.sleep(0.5)
    png = base64.b64decode(driver.s("GET", "/screenshot", timeout=120))
    os.makedirs(os.path.dirname(os.path.abspath(opts.out)), exist_ok=True)
    with open(opts.out, "wb") as f:
        f.write(png)
    report(page)
    print(f"page finished in {elapsed:.1f} s; wrote {opts.out} ({len(png) // 1024} KiB)")
    return page["verdict"] == "pass"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?", default=os.path.join(ROOT, "docs", "web-demo.png"))
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--width", type=int, default=1100)
    ap.add_argument("--query", default="", help='appended to the address, e.g. "steps=20"')
    opts = ap.parse_args()
    if not os.path.exists(os.path.join(HERE, "pkg", "web.js")):
        sys.exit("examples/web/pkg/web.js is missing: run examples/web/build.sh first")
    chromedriver = os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver")

    os.environ.setdefault("SERVE_QUIET", "1")
    server = serve.make_server(0)
    opts.port = server.server_address[1]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    opts.profile = tempfile.mkdtemp(prefix="wgpu-tp-chromium-")
    driver_port = free_port()
    # Its own process group, so that the browser it starts goes with it.
    proc = subprocess.Popen([chromedriver, f"--port={driver_port}"], start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    driver = WebDriver(driver_port)
    ok = False
    try:
        driver.wait_ready(proc)
        ok = run(opts, driver)
        if not ok:
            print("the page finished but reported FAIL", file=sys.stderr)
    except Exception as e:  # noqa: BLE001 (report anything, then clean up)
        print(f"error: {e}", file=sys.stderr)
    finally:
        driver.quit()
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(proc.pid, sig)
                proc.wait(timeout=10)
                break
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
        server.shutdown()
        server.server_close()
        shutil.rmtree(opts.profile, ignore_errors=True)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
