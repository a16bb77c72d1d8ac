"""A remote git repository as a knowledge source.

The clone is a bare partial clone (``--filter=blob:none``) under
``<data_dir>/git/<source name>``: full history of commits and trees, so each file's
``updated_at`` is the time of the last commit that touched it, but only the blobs lore
reads are ever downloaded. There is no working tree. Files are read with
``git cat-file --batch`` at the fetched commit, so a fetch that fails halfway leaves
nothing half-updated: the previous commit is still what ``refs/lore/fetched`` names, and
the listing fails with ``SourceError`` (sync then prunes nothing and keeps its token).

Incremental: the resume token is the commit listed. The next listing is
``git diff --name-status --no-renames <token> <new head>``: added and modified files as
documents, deleted ones (a rename is a deletion plus an addition) as tombstones. When the
token is not an ancestor of the new head (a force-push), or lore no longer has it, the
listing is complete instead, with tombstones for what the token's tree had and the new one
lacks, when that tree is still known. Each listed commit is kept reachable under
``refs/lore/listed/`` until the next listing, so a force-push upstream cannot take the
old tree away.

File types, front matter, titles, labels and include/exclude globs are the filesystem
source's (``lore.sources.filesystem``); globs apply to paths relative to ``path``.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from pathspec import GitIgnoreSpec
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from lore.chunking import FRONT_MATTER_MEDIA_TYPES, split_front_matter
from lore.errors import ConfigError, SourceError
from lore.models import Document, SourceFailure, SourceItem, Tombstone, Visibility
from lore.sources.filesystem import (
    DEFAULT_EXCLUDE,
    DEFAULT_INCLUDE,
    FOLDER_LABEL,
    MEDIA_TYPES,
    _title,
    front_matter_labels,
)
from lore.sources.git_transport import (
    GitAuth,
    RemoteUrl,
    git_environment,
    parse_remote_url,
    read_token,
    run_git,
)

#: The commit the last successful fetch brought; the only ref a listing reads from.
FETCHED_REF = "refs/lore/fetched"
#: Commits handed out as resume tokens, kept so a force-push cannot take their trees away.
LISTED_PREFIX = "refs/lore/listed/"
#: Where a fallback full fetch lands; the listing keeps reading FETCHED_REF's commit.
_REFETCH_REF = "refs/lore/refetch"
_COMMIT_ID = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")
_BRANCH = re.compile(r"^(?!-)(?!.*\.\.)(?!.*//)[^\s~^:?*\[\\\x00-\x1f\x7f]+(?<![./])$")
#: Enough to tell text from binary; a NUL byte never occurs in UTF-8 text.
_SNIFF_BYTES = 8192
#: Blobs read per ``git cat-file --batch``: bounds memory, amortises process start-up.
_READ_BATCH = 128
_SYMLINK_MODE = "120000"


class GitSourceConfig(BaseModel):
    """One ``[[sources]]`` table of ``type = "git"``."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
    type: Literal["git"] = "git"
    url: str
    #: None: the remote's default branch (its HEAD).
    branch: str | None = None
    #: Sub-path of the repository to index; globs are relative to it.
    path: str = ""
    include: list[str] = Field(default_factory=lambda: list(DEFAULT_INCLUDE))
    exclude: list[str] = Field(default_factory=lambda: list(DEFAULT_EXCLUDE))
    labels: dict[str, str] = Field(default_factory=dict)
    #: Deliberately without a default: an undeclared visibility is refused at sync.
    visibility: Visibility | None = None
    ssh_key_file: Path | None = None
    #: lore's own known-hosts file; default ``<data_dir>/git/known_hosts``.
    known_hosts_file: Path | None = None
    #: False accepts (and records) an unknown host's key on first contact; a changed key
    #: is always refused.
    strict_host_key_checking: bool = True
    token_env: str | None = None
    token_file: Path | None = None
    allow_private_hosts: bool = False
    max_file_bytes: int = Field(default=2_000_000, gt=0)

    @field_validator("visibility", mode="before")
    @classmethod
    def _visibility(cls, value: object) -> object:
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("branch")
    @classmethod
    def _branch(cls, value: str | None) -> str | None:
        if value is not None and not _BRANCH.match(value):
            raise ValueError(f"{value!r} is not a valid branch name")
        return value

    @field_validator("path")
    @classmethod
    def _sub_path(cls, value: str) -> str:
        cleaned = PurePosixPath(value.strip().strip("/")) if value.strip().strip("/") else None
        if cleaned is None:
            return ""
        if cleaned.is_absolute() or ".." in cleaned.parts or str(cleaned).startswith("-"):
            raise ValueError(f"{value!r} must be a relative path inside the repository")
        return str(cleaned)


def parse_git_config(table: Mapping[str, Any]) -> GitSourceConfig:
    """A ``[[sources]]`` table as a GitSourceConfig, or one ConfigError saying what is wrong."""
    try:
        return GitSourceConfig.model_validate(dict(table))
    except ValidationError as err:
        name = table.get("name", "?")
        problems = "; ".join(
            f"{'.'.join(str(part) for part in error['loc']) or 'source'}: {error['msg']}"
            for error in err.errors()
        )
        raise ConfigError(f"source {name!r}: {problems}") from err


def git_source(config: GitSourceConfig, data_dir: Path) -> GitSource:
    """Build the source; the URL is checked now (ConfigError), nothing is fetched yet."""
    parse_remote_url(config.url, allow_private_hosts=config.allow_private_hosts)
    if config.token_env and config.token_file:
        raise ConfigError(f"source {config.name!r}: set token_env or token_file, not both")
    return GitSource(config, Path(data_dir))


class GitSource:
    """Files of one branch of a remote repository, at its newest commit."""

    source_type = "git"
    incremental = True

    def __init__(self, config: GitSourceConfig, data_dir: Path) -> None:
        self.config = config
        self.name = config.name
        self.visibility = config.visibility
        self.labels = dict(config.labels)
        self.repo_dir = data_dir / "git" / config.name
        self.known_hosts_file = config.known_hosts_file or data_dir / "git" / "known_hosts"
        self._include = GitIgnoreSpec.from_lines(config.include)
        self._exclude = GitIgnoreSpec.from_lines(config.exclude)
        self._token: str | None = None

    def __repr__(self) -> str:
        return f"GitSource({self.name!r}, {self.config.url!r})"

    def uri_for(self, repo_path: str) -> str:
        """``git://<source name>@<path in the repository>``."""
        return f"git://{self.name}@{repo_path}"

    def resume_token(self) -> str | None:
        return self._token

    async def documents(self, since: str | None = None) -> AsyncIterator[SourceItem]:
        """Fetch, then yield what changed since ``since`` (a commit this source handed out),
        or everything. Raises SourceError before yielding anything when the fetch fails."""
        self._token = None
        git = await asyncio.to_thread(self._connect)
        head = await asyncio.to_thread(git.fetch)
        changes = await asyncio.to_thread(self._plan, git, since, head)
        paths = [path for path, _ in changes.updated]
        for path in changes.deleted:
            yield Tombstone(self.uri_for(path))
        dates = await asyncio.to_thread(git.last_commit_times, head, paths, self.config.path)
        blobs = dict(changes.updated)
        await asyncio.to_thread(git.prefetch, head, list(blobs.values()))
        for start in range(0, len(paths), _READ_BATCH):
            batch = paths[start : start + _READ_BATCH]
            items = await asyncio.to_thread(self._read_batch, git, batch, blobs, changes.modes, dates)
            for item in items:
                yield item
        await asyncio.to_thread(git.pin, head, keep=since)
        self._token = head

    # -- planning --------------------------------------------------------------------

    def _connect(self) -> _Repository:
        remote = parse_remote_url(self.config.url, allow_private_hosts=self.config.allow_private_hosts)
        token = read_token(self.config.token_env, self.config.token_file, self.name)
        if token and remote.scheme == "http" and not self.config.allow_private_hosts:
            raise ConfigError(
                f"source {self.name!r}: a token is sent over https:// only, not {remote.scheme}://"
            )
        auth = GitAuth(
            remote,
            known_hosts_file=self.known_hosts_file,
            strict_host_key_checking=self.config.strict_host_key_checking,
            ssh_key_file=self.config.ssh_key_file,
            token=token,
        )
        return _Repository(self.name, self.repo_dir, auth, self.config.branch)

    def _plan(self, git: _Repository, since: str | None, head: str) -> _Changes:
        tree = git.list_tree(head, self.config.path)
        wanted = {path: entry for path, entry in tree.items() if self._selected(path)}
        old = since if since and _COMMIT_ID.match(since) and git.has_listed(since) else None
        if old is not None and git.is_ancestor(old, head):
            changed, deleted = git.diff(old, head, self.config.path)
            updated = [(path, wanted[path][1]) for path in changed if path in wanted]
            return _Changes(updated, deleted, {path: wanted[path][0] for path, _ in updated})
        # A force-push, a token lore no longer has, or the first listing: everything, plus
        # tombstones for what the old tree had, when it is still known.
        deleted = git.diff(old, head, self.config.path)[1] if old is not None else []
        updated = [(path, entry[1]) for path, entry in sorted(wanted.items())]
        return _Changes(updated, deleted, {path: entry[0] for path, entry in wanted.items()})

    def _relative(self, repo_path: str) -> str:
        prefix = self.config.path
        return repo_path[len(prefix) + 1 :] if prefix else repo_path

    def _selected(self, repo_path: str) -> bool:
        relative = self._relative(repo_path)
        return bool(self._include.match_file(relative)) and not self._exclude.match_file(relative)

    # -- reading ---------------------------------------------------------------------

    def _read_batch(
        self,
        git: _Repository,
        paths: Sequence[str],
        blobs: Mapping[str, str],
        modes: Mapping[str, str],
        dates: Mapping[str, datetime],
    ) -> list[Document | SourceFailure]:
        readable = [path for path in paths if modes.get(path) != _SYMLINK_MODE]
        contents = git.read_blobs([blobs[path] for path in readable], self.config.max_file_bytes)
        items: list[Document | SourceFailure] = []
        for path in paths:
            uri = self.uri_for(path)
            if modes.get(path) == _SYMLINK_MODE:
                items.append(SourceFailure(uri, "symbolic link; links in a git source are not followed"))
                continue
            content = contents[blobs[path]]
            if isinstance(content, int):
                limit = f"this source's max_file_bytes ({self.config.max_file_bytes:,})"
                items.append(SourceFailure(uri, f"file is {content:,} bytes, over {limit}"))
            elif b"\x00" in content[:_SNIFF_BYTES]:
                items.append(
                    SourceFailure(uri, "binary file (contains NUL bytes); only UTF-8 text is indexed")
                )
            else:
                try:
                    text = content.decode("utf-8-sig")
                except UnicodeDecodeError as err:
                    reason = f"not valid UTF-8 (byte 0x{content[err.start]:02x} at offset {err.start})"
                    items.append(SourceFailure(uri, reason))
                    continue
                when = dates.get(path)
                if when is None:
                    items.append(SourceFailure(uri, "no commit touching this file was found"))
                    continue
                items.append(self._document(path, text, blobs[path], when))
        return items

    def _document(self, repo_path: str, text: str, blob_id: str, updated_at: datetime) -> Document:
        relative = PurePosixPath(self._relative(repo_path))
        media_type = MEDIA_TYPES.get(relative.suffix.lower(), "text/plain")
        metadata: dict[str, Any] = {}
        body = text
        if media_type in FRONT_MATTER_MEDIA_TYPES:
            metadata, body = split_front_matter(text)
        labels = front_matter_labels(metadata)
        if str(relative.parent) != ".":
            labels[FOLDER_LABEL] = str(relative.parent)
        labels.update(self.labels)
        return Document(
            uri=self.uri_for(repo_path),
            title=_title(metadata, body, media_type, relative),
            text=body,
            revision=blob_id,
            updated_at=updated_at,
            labels=labels,
            media_type=media_type,
        )


@dataclass(frozen=True, slots=True)
class _Changes:
    #: (repository path, blob id) to read, in order.
    updated: list[tuple[str, str]]
    deleted: list[str]
    #: Repository path -> git file mode, for the paths in ``updated``.
    modes: dict[str, str]


class _Repository:
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
            init = _Repository(self.source, staging, self.auth, self.branch)
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
                files[name.decode("utf-8", "surrogateescape")] = (mode, oid)
        return files

    def has_listed(self, commit: str) -> bool:
        ref = f"{LISTED_PREFIX}{commit}"
        return bool(
            self.git("for-each-ref", "--format=%(objectname)", ref, what="reading the last listing").strip()
        )

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
        fields = [field.decode("utf-8", "surrogateescape") for field in out.split(b"\0")]
        changed: list[str] = []
        deleted: list[str] = []
        for status, path in zip(fields[0::2], fields[1::2], strict=False):
            (deleted if status == "D" else changed).append(path)
        return changed, deleted

    def last_commit_times(self, head: str, paths: Sequence[str], sub_path: str) -> dict[str, datetime]:
        """When each path was last changed: one walk of the history, newest first, that
        stops as soon as every path has been seen."""
        wanted = set(paths)
        found: dict[str, datetime] = {}
        if not wanted:
            return found
        for when, touched in self._history(head, sub_path):
            for path in touched & wanted:
                found[path] = when
            wanted -= touched
            if not wanted:
                break
        return found

    def _history(self, head: str, sub_path: str) -> Iterator[tuple[datetime, set[str]]]:
        out = self.git(
            "log",
            "-z",
            "--no-renames",
            "--name-only",
            "--format=%x01%ct",
            head,
            "--",
            *_pathspec(sub_path),
            what="reading history",
        )
        for record in out.split(b"\x01")[1:]:
            header, _, names = record.partition(b"\0")
            touched = {
                name.decode("utf-8", "surrogateescape") for name in names.lstrip(b"\n").split(b"\0") if name
            }
            yield datetime.fromtimestamp(int(header), UTC), touched

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
            oid, _, size = line.split()
            sizes[oid] = int(size)
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

    def pin(self, commit: str, *, keep: str | None) -> None:
        """Keep ``commit`` (the new token) and ``keep`` (the one sync holds until it stores
        the new one) reachable; drop older pins."""
        out = self.git("for-each-ref", "--format=%(refname)", LISTED_PREFIX, what="reading the last listing")
        for ref in out.decode().split():
            if ref not in (f"{LISTED_PREFIX}{commit}", f"{LISTED_PREFIX}{keep}"):
                self.git("update-ref", "-d", ref, what="forgetting an old listing")
        self.git("update-ref", f"{LISTED_PREFIX}{commit}", commit, what="recording the listing")


def _pathspec(sub_path: str) -> list[str]:
    return [f":(top,literal){sub_path}"] if sub_path else []


def _display(remote: RemoteUrl) -> str:
    return remote.url
