"""The throwaway PostgreSQL cluster starts wherever the checkout lies.

As root the server runs as the ``postgres`` user, who cannot enter a clone under ``/root`` or
under a ``mktemp -d`` folder (0700): the bundled binaries inside ``.venv`` must be relocated,
or the failure must be one line that says what to do.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from pathlib import Path

import pytest

from .pg_cluster import ClusterError, server_bin_dir, start_cluster

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="only root hands the server to another user; as yourself it reaches your files"
)


def _private_copy_of_the_server(tmp_path: Path) -> Path:
    """The bundled install tree under a root-only folder, as in a clone under a mktemp -d dir."""
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    bin_dir = server_bin_dir()
    package = bin_dir.parents[1]
    site = private / "venv" / "site-packages"
    shutil.copytree(package, site / package.name, symlinks=True)
    for libs in package.parent.glob(f"{package.name}*.libs"):  # the wheel's shared libraries
        shutil.copytree(libs, site / libs.name, symlinks=True)
    for path in site.rglob("*"):  # as pip leaves files under umask 077: the owner's alone
        if path.is_file() and not path.is_symlink():
            path.chmod(path.stat().st_mode & 0o700)
    return site / package.name / bin_dir.relative_to(package)


def test_server_under_a_root_only_folder_still_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LORE_TEST_PG_BIN", str(_private_copy_of_the_server(tmp_path)))
    cluster = start_cluster()
    try:
        assert not cluster.bin_dir.is_relative_to(tmp_path)
        with socket.create_connection(("127.0.0.1", cluster.port), timeout=5):
            pass
    finally:
        cluster.stop()
    assert not cluster.root.exists()


def test_temp_folder_the_server_user_cannot_enter_is_one_clear_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    private = tmp_path / "private-tmp"
    private.mkdir(mode=0o700)
    monkeypatch.setattr(tempfile, "tempdir", str(private))
    with pytest.raises(ClusterError) as caught:
        start_cluster()
    message = str(caught.value)
    assert "\n" not in message
    assert "TMPDIR" in message
    assert list(private.iterdir()) == []
