"""The bare partial clone behind a git source, and the git commands run against it.

Every command reads or writes under ``--git-dir``; there is no working tree. Listing
reads only ``FETCHED_REF``'s commit, which a fetch moves only when it succeeds.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Generator, Sequence
from datetime import UTC, datetime
from pathlib import Path

from lore.errors import SourceError
from lore.sources.git_transport import GitAuth, RemoteUrl, git_environment, git_error, run_git

#: The commit the last successful fetch brought; the only ref a listing reads from.
FETCHED_REF = "refs/lore/fetched"
#: Where a fallback full fetch lands; the listing keeps reading FETCHED_REF's commit.
_REFETCH_REF = "refs/lore/refetch"


class Repository:
    """The bare partial clone of one source, and the git commands run against it."""

    def __init__(self, source: str, path: Path, auth: GitAuth, branch: str | None) -> None:
        self.source = source
        self.path = path
        self.auth = auth
        self.branch = branch
        self.env = git_environment(auth)
        self.secrets = auth.secrets()

    def git(
        self, *args: str, what: str, stdin: bytes | None = None, ok_codes: tuple[int, ...] = (0,)
    ) -> bytes:
        done = run_git(
            ["--git-dir", str(self.path), *args],
            env=self.env,
            secrets=self.secrets,
            what=f"source {self.source!r}: {what}",
            stdin=stdin,
            ok_codes=ok_codes,
        )
        return done.stdout

    def fetch(self) -> str:
        """Bring the branch's newest commit; on any failure the previous one stays. The
        object filter is the clone's ``remote.origin.partialclonefilter``."""
        self._ensure_initialised(self.auth.remote)
        self.git("config", "remote.origin.url", self.auth.remote.url, what="setting the remote")
        self.auth.known_hosts_file.parent.mkdir(parents=True, exist_ok=True)
        ref = self._ref()
        try:
            self._fetch(ref)
        except SourceError as err:
            if "host key verification failed" not in str(err).lower():
                raise
            hint = f"the server's key must be in {self.auth.known_hosts_file} (lore's own known-hosts file)"
            raise SourceError(f"{err}; {hint}") from err
        out = self.git(
            "rev-parse", "--verify", f"{FETCHED_REF}^{{commit}}", what="reading the fetched commit"
        )
        return out.decode().strip()

    def _fetch(self, ref: str) -> None:
        self.git(
            "fetch",
            "--quiet",
            "--no-tags",
            "--no-write-fetch-head",
            "origin",
            f"+{ref}:{FETCHED_REF}",
            what=f"fetching {_display(self.auth.remote)} ({self.branch or 'default branch'})",
        )

    def _ref(self) -> str:
        return f"refs/heads/{self.branch}" if self.branch else "HEAD"

    def _ensure_initialised(self, remote: RemoteUrl) -> None:
        if (self.path / "HEAD").is_file():
            return
        # Built beside its final place and renamed in, so an interrupted first sync never
        # leaves a clone that looks complete.
        self.path.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{self.path.name}-", dir=self.path.parent))
        try:
            init = Repository(self.source, staging, self.auth, self.branch)
            init.git("init", "--quiet", "--bare", what="creating the clone")
            for key, value in (
                ("core.repositoryformatversion", "1"),
                ("extensions.partialClone", "origin"),
                ("remote.origin.url", remote.url),
                ("remote.origin.promisor", "true"),
                ("remote.origin.partialclonefilter", "blob:none"),
            ):
                init.git("config", key, value, what="creating the clone")
            if self.path.exists():
                shutil.rmtree(self.path)  # a directory without HEAD is not a usable clone
            staging.rename(self.path)
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def list_tree(self, commit: str, sub_path: str) -> dict[str, tuple[str, str]]:
        """Repository path -> (mode, blob id) of every file under ``sub_path``."""
        out = self.git(
            "ls-tree", "-r", "-z", "--full-tree", commit, "--", *_pathspec(sub_path), what="listing files"
        )
        files: dict[str, tuple[str, str]] = {}
        for record in out.split(b"\0"):
            if not record:
                continue
            meta, _, name = record.partition(b"\t")
            mode, kind, oid = meta.decode().split()
            if kind == "blob":
                files[name.decode("utf-8", "replace")] = (mode, oid)
        return files

    def has_commit(self, commit: str) -> bool:
        """True when the clone has ``commit``. A commit it lacks is asked for once (the
        partial clone's lazy fetch); one the server no longer has is simply absent."""
        done = run_git(
            ["--git-dir", str(self.path), "cat-file", "-e", f"{commit}^{{commit}}"],
            env=self.env,
            secrets=self.secrets,
            what=f"source {self.source!r}: looking up the last synced commit",
            ok_codes=tuple(range(256)),
        )
        return done.returncode == 0

    def is_ancestor(self, old: str, new: str) -> bool:
        out = run_git(
            ["--git-dir", str(self.path), "merge-base", "--is-ancestor", old, new],
            env=self.env,
            secrets=self.secrets,
            what=f"source {self.source!r}: comparing commits",
            ok_codes=(0, 1),
        )
        return out.returncode == 0

    def diff(self, old: str, new: str, sub_path: str) -> tuple[list[str], list[str]]:
        """(added or modified paths, deleted paths). Without rename detection, which would
        download blobs to compare them: a rename is a deletion and an addition."""
        out = self.git(
            "diff",
            "--name-status",
            "-z",
            "--no-renames",
            old,
            new,
            "--",
            *_pathspec(sub_path),
            what="listing changes",
        )
        fields = [field.decode("utf-8", "replace") for field in out.split(b"\0")]
        changed: list[str] = []
        deleted: list[str] = []
        for status, path in zip(fields[0::2], fields[1::2], strict=False):
            (deleted if status == "D" else changed).append(path)
        return changed, deleted

    def last_commit_times(self, head: str, paths: Sequence[str], sub_path: str) -> dict[str, datetime]:
        """When each path was last changed: one walk of the history, newest first, that
        stops as soon as every path has been seen. A path no commit shows (a change made
        only in a merge, which ``git log`` does not diff) takes the head commit's time."""
        wanted = set(paths)
        found: dict[str, datetime] = {}
        if not wanted:
            return found
        history = self._history(head, sub_path)
        for when, touched in history:
            for path in touched & wanted:
                found[path] = when
            wanted -= touched
            if not wanted:
                history.close()  # stops git; the rest of the history is not read
                return found
        stamp = self.git("log", "-1", "--format=%ct", head, what="reading history").strip()
        found.update(dict.fromkeys(wanted, datetime.fromtimestamp(int(stamp), UTC)))
        return found

    def _history(self, head: str, sub_path: str) -> Generator[tuple[datetime, set[str]], None, None]:
        """(commit time, paths it touched) per commit, streamed from ``git log``."""
        args = ["git", "--git-dir", str(self.path), "log", "-z", "--no-renames", "--name-only"]
        args += ["--format=%x01%ct", head, "--", *_pathspec(sub_path)]
        with tempfile.TemporaryFile() as errors:
            try:
                process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=errors, env=self.env)
            except OSError as err:
                raise SourceError(f"source {self.source!r}: reading history: cannot run git: {err}") from err
            assert process.stdout is not None
            try:
                pending = b""
                for chunk in iter(lambda: process.stdout.read(65536), b""):  # type: ignore[union-attr]
                    records = (pending + chunk).split(b"\x01")
                    pending = records.pop()
                    yield from (_commit_record(record) for record in records if record)
                if pending:
                    yield _commit_record(pending)
            finally:
                if process.poll() is None:
                    process.kill()
                code = process.wait()
                process.stdout.close()
            if code != 0:
                errors.seek(0)
                raise SourceError(
                    f"source {self.source!r}: reading history: {git_error(errors.read(), self.secrets)}"
                )

    def prefetch(self, commit: str, blob_ids: Sequence[str]) -> None:
        """Download, in one request, the blobs about to be read that the clone lacks;
        otherwise git would fetch them lazily, one round trip each."""
        if not blob_ids:
            return
        out = self.git(
            "rev-list", "--objects", "--missing=print", "--no-walk", commit, what="finding missing files"
        )
        missing = {line[1:].split()[0] for line in out.decode().splitlines() if line.startswith("?")}
        needed = sorted(missing.intersection(blob_ids))
        if not needed:
            return
        try:
            self.git(
                *("-c", "fetch.negotiationAlgorithm=noop", "fetch", "--quiet", "--no-tags"),
                *("--no-write-fetch-head", "--recurse-submodules=no", "--filter=blob:none", "--stdin"),
                "origin",
                what=f"downloading {len(needed)} files",
                stdin="".join(f"{oid}\n" for oid in needed).encode(),
            )
        except SourceError:
            # A server that speaks only protocol v0 (plain sshd without AcceptEnv
            # GIT_PROTOCOL, say) may refuse wants of unadvertised objects; lazy fetching
            # would fail the same way. Fetch everything once, and filter no more.
            self.git(
                *("fetch", "--quiet", "--no-tags", "--no-write-fetch-head", "--refetch", "--no-filter"),
                *("origin", f"+{self._ref()}:{_REFETCH_REF}"),
                what="downloading the whole repository (the server refused a partial fetch)",
            )
            self.git("update-ref", "-d", _REFETCH_REF, what="downloading the whole repository")
            self.git(
                "config", "--unset", "remote.origin.partialclonefilter", what="turning partial clone off"
            )

    def read_blobs(self, blob_ids: Sequence[str], max_bytes: int) -> dict[str, bytes | int]:
        """Blob id -> content, or its size when over ``max_bytes`` (not read)."""
        unique = list(dict.fromkeys(blob_ids))
        if not unique:
            return {}
        request = "".join(f"{oid}\n" for oid in unique).encode()
        sizes: dict[str, int] = {}
        for line in (
            self.git("cat-file", "--batch-check", what="reading files", stdin=request).decode().splitlines()
        ):
            fields = line.split()
            if len(fields) != 3:  # "<oid> missing": the server did not send it
                raise SourceError(f"source {self.source!r}: reading files: object {fields[0]} is missing")
            sizes[fields[0]] = int(fields[2])
        small = [oid for oid in unique if sizes[oid] <= max_bytes]
        result: dict[str, bytes | int] = {oid: sizes[oid] for oid in unique if sizes[oid] > max_bytes}
        if small:
            out = self.git(
                "cat-file",
                "--batch",
                what="reading files",
                stdin="".join(f"{oid}\n" for oid in small).encode(),
            )
            offset = 0
            for oid in small:
                end = out.index(b"\n", offset)
                length = int(out[offset:end].split()[2])
                result[oid] = out[end + 1 : end + 1 + length]
                offset = end + 1 + length + 1  # the content is followed by a newline
        return result


def _commit_record(record: bytes) -> tuple[datetime, set[str]]:
    """``<commit time>\\0\\n<path>\\0<path>\\0...`` from ``git log -z --name-only``."""
    header, _, names = record.partition(b"\0")
    touched = {name.decode("utf-8", "replace") for name in names.lstrip(b"\n").split(b"\0") if name}
    return datetime.fromtimestamp(int(header), UTC), touched


def _pathspec(sub_path: str) -> list[str]:
    return [f":(top,literal){sub_path}"] if sub_path else []


def _display(remote: RemoteUrl) -> str:
    return remote.url
