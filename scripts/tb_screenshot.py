"""Screenshots of a real TensorBoard, for checking by eye what a person sees.

    python scripts/tb_screenshot.py outputs/multirun/<time>_<id>            # -> tb_screenshots/*.png
    python scripts/tb_screenshot.py <logdir> --out shots --pages hparams timeseries

Starts ``tensorboard --logdir <logdir>`` on a free local port, waits until it answers, opens each
page in headless Chromium (``chromium`` or ``google-chrome`` on PATH; Debian: ``apt-get install
chromium``) with a fresh profile, saves one PNG per page, and stops TensorBoard. Nothing here is
part of the library; the pictures are not kept in the repository.
"""

from __future__ import annotations

import argparse
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

PAGES = {"timeseries": "#timeseries", "scalars": "#scalars", "hparams": "#hparams", "custom_scalars": "#custom_scalars"}
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
# A fresh profile and no network beyond the local TensorBoard: no sign-in, updates or sync.
CHROME_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--hide-scrollbars"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until_up(url: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise SystemExit(f"error: TensorBoard did not answer at {url} within {timeout:.0f} s")


def browser() -> str:
    for name in BROWSERS:
        if path := shutil.which(name):
            return path
    raise SystemExit(f"error: no browser found (looked for {', '.join(BROWSERS)}); install one, e.g. `apt-get install chromium`")


def screenshot(chrome: str, url: str, out: Path, size: str, wait_ms: int) -> None:
    with tempfile.TemporaryDirectory(prefix="tb-shot-profile-") as profile:
        cmd = [chrome, *CHROME_FLAGS, f"--user-data-dir={profile}", f"--window-size={size}",
               f"--virtual-time-budget={wait_ms}", f"--screenshot={out}", url]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("logdir", type=Path, help="folder TensorBoard reads (a sweep folder, outputs/, a run folder)")
    ap.add_argument("--out", type=Path, default=Path("tb_screenshots"), help="where the PNGs go (default: tb_screenshots/)")
    ap.add_argument("--pages", nargs="+", default=["timeseries", "hparams"], choices=sorted(PAGES), help="TensorBoard pages to capture")
    ap.add_argument("--size", default="1600,1000", help="window width,height in pixels")
    ap.add_argument("--wait-ms", type=int, default=20000, help="page time the browser lets pass before the picture (data loads)")
    args = ap.parse_args(argv)
    if not args.logdir.is_dir():
        raise SystemExit(f"error: logdir {args.logdir} is not a folder; pass a sweep folder such as outputs/multirun/<time>_<id>")
    chrome = browser()
    args.out.mkdir(parents=True, exist_ok=True)
    port = free_port()
    tb = subprocess.Popen([sys.executable, "-m", "tensorboard.main", "--logdir", str(args.logdir), "--port",
                           str(port), "--host", "127.0.0.1",
                           "--reload_interval", "0"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        base = f"http://127.0.0.1:{port}/"
        wait_until_up(base, 60)
        time.sleep(3)  # the first load of the event files
        for page in args.pages:
            out = (args.out / f"{page}.png").resolve()
            screenshot(chrome, base + PAGES[page], out, args.size, args.wait_ms)
            print(f"{page}: {out}")
    finally:
        tb.terminate()
        tb.wait(timeout=10)


if __name__ == "__main__":
    main()
