"""Real mounts for tests of faults around an index: a small tmpfs that fills up, a
read-only bind mount. They need root (mount(8)); elsewhere the tests skip with the
reason, except under ``CI=true``, where a skip would hide a regression and fails
instead. Mount points live outside pytest's numbered temp folders, and every mount is
undone in the fixture's teardown, also when the test fails."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


def _unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (CI=true: this must run in CI, not skip)", pytrace=False)
    pytest.skip(reason)


def _mount(*args: str) -> None:
    try:
        subprocess.run(["mount", *args], check=True, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as err:
        detail = getattr(err, "stderr", "") or err
        _unavailable(f"cannot mount ({' '.join(args)}): {detail}; these tests need root")


def _umount(target: Path) -> None:
    subprocess.run(["umount", "-l", str(target)], check=False, capture_output=True, timeout=30)


@pytest.fixture
def mount_root() -> Iterator[Path]:
    """Mount points outside pytest's numbered temp folders, which other pytest sessions on
    the machine clean up: they must never walk into (or delete inside) a live mount."""
    root = Path(tempfile.mkdtemp(prefix="lore-test-mounts-"))
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def read_only_view(mount_root: Path) -> Iterator[tuple[Path, Path]]:
    """``(built, served)``: a folder, and the same folder through a read-only bind mount."""
    built, served = mount_root / "built", mount_root / "served"
    built.mkdir()
    served.mkdir()
    _mount("--bind", str(built), str(served))
    try:
        _mount("-o", "remount,ro,bind", str(served))
        yield built, served
    finally:
        _umount(served)


@pytest.fixture
def small_disk(mount_root: Path) -> Iterator[Path]:
    disk = mount_root / "disk"
    disk.mkdir()
    _mount("-t", "tmpfs", "-o", "size=2m", "tmpfs", str(disk))
    try:
        yield disk
    finally:
        _umount(disk)


def fill_disk(disk: Path) -> None:
    """Write until not one more byte fits (a page of a new file is what the next write needs)."""
    fd = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for size in (1 << 20, 1 << 16, 1 << 12, 1 << 9, 1):
            block = b"\0" * size
            while True:
                try:
                    if os.write(fd, block) < size:
                        break
                except OSError:
                    break
    finally:
        os.close(fd)
    with pytest.raises(OSError, match="No space left"):
        (disk / "probe").write_bytes(b"x" * 8192)
