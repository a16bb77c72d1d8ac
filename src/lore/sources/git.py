"""A remote git repository as a knowledge source.

The clone is a bare partial clone (``--filter=blob:none``) under
``<data_dir>/git/<source name>``: full history of commits and trees, so each file's
``updated_at`` is the time of the last commit that touched it, but only the blobs lore
reads are ever downloaded. There is no working tree. Files are read with
``git cat-file --batch`` at the fetched commit, so a fetch that fails halfway leaves
nothing half-updated: the previous commit is still what ``refs/lore/fetched`` names, and
the listing fails with ``SourceError`` (sync then prunes nothing and keeps its token).
Why a partial clone and not ``--depth=1``: a shallow clone has no history, hence no dates.

Incremental: the resume token is the commit listed. The next listing is
``git diff --name-status --no-renames <token> <new head>``: added and modified files as
documents, deleted ones (a rename is a deletion plus an addition) as tombstones. When the
token is not an ancestor of the new head (a force-push), or lore no longer has it, the
listing is complete instead, and the source says so (``listing_was_complete``): sync then
prunes what the listing lacks, exactly as after a filesystem source's listing, mass-delete
guard included.

File types, front matter, titles, labels and include/exclude globs are the filesystem
source's (``lore.sources.filesystem``); globs apply to paths relative to ``path``.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path, PurePosixPath

from pathspec import GitIgnoreSpec

from lore.config import LoreSettings
from lore.errors import ConfigError, ExtractionError
from lore.extract import CONVERTED_SUFFIXES, EXTRACTION_VERSION, extract
from lore.models import Document, SourceFailure, SourceItem, Tombstone, Visibility
from lore.source_tables.git import GitSourceConfig as GitSourceConfig
from lore.sources import parse_visibility
from lore.sources.filesystem import (
    decode_text,
    file_document,
    too_large,
)
from lore.sources.git_repo import Repository
from lore.sources.git_transport import GitAuth, parse_remote_url, read_token

_COMMIT_ID = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")
_BRANCH = re.compile(r"^(?!-)(?!.*\.\.)(?!.*//)[^\s~^:?*\[\\\x00-\x1f\x7f]+(?<![./])$")
#: Blobs read per ``git cat-file --batch``: bounds memory, amortises process start-up.
_READ_BATCH = 128
_SYMLINK_MODE = "120000"


#: The model of its tables (``lore.source_tables``), where callers have always found it.
CONFIG_MODEL = GitSourceConfig


def from_config(config: GitSourceConfig, settings: LoreSettings, visibility: Visibility | None) -> GitSource:
    """The ``[[sources]]`` table of ``type = "git"``: the clone goes under the settings'
    data folder; relative key, known-hosts and token files are relative to lore.toml."""
    files = {
        key: settings.resolve_path(value.expanduser())
        for key in ("ssh_key_file", "known_hosts_file", "token_file")
        if isinstance(value := getattr(config, key), Path)
    }
    config = config.model_copy(update=files)
    _check(config)
    return GitSource(config, settings.resolved_data_dir(), visibility)


def git_source(config: GitSourceConfig, data_dir: Path) -> GitSource:
    """Build the source; the URL is checked now (ConfigError), nothing is fetched yet."""
    _check(config)
    return GitSource(config, Path(data_dir), parse_visibility(config))


def _check(config: GitSourceConfig) -> None:
    try:
        remote = parse_remote_url(config.url, allow_private_hosts=config.allow_private_hosts)
    except ConfigError as err:
        raise ConfigError(f"source {config.name!r}: {err}") from err
    given = sum(bool(value) for value in (config.token_env, config.token_file, config.token))
    if given > 1:
        raise ConfigError(f"source {config.name!r}: set one of token, token_env or token_file")
    if given and not _token_transport_ok(remote.scheme, config):
        raise ConfigError(
            f"source {config.name!r}: a token is sent over https:// only, not {remote.scheme}://"
        )


def _token_transport_ok(scheme: str, config: GitSourceConfig) -> bool:
    """https carries a token; plain http only to a private host the source allows (a test
    or lab server on loopback); ssh and git:// never send it."""
    return scheme == "https" or (scheme == "http" and config.allow_private_hosts)


class GitSource:
    """Files of one branch of a remote repository, at its newest commit."""

    source_type = "git"
    incremental = True

    def __init__(self, config: GitSourceConfig, data_dir: Path, visibility: Visibility | None) -> None:
        self.config = config
        self.name = config.name
        self.visibility = visibility
        self.labels = dict(config.labels)
        self.repo_dir = data_dir / "git" / config.name
        self.known_hosts_file = config.known_hosts_file or data_dir / "git" / "known_hosts"
        self._include = GitIgnoreSpec.from_lines(config.include)
        self._exclude = GitIgnoreSpec.from_lines(config.exclude)
        self._token: str | None = None
        self._complete = False

    def __repr__(self) -> str:
        return f"GitSource({self.name!r}, {self.config.url!r})"

    def uri_for(self, repo_path: str) -> str:
        """``git://<source name>@<path in the repository>``."""
        return f"git://{self.name}@{repo_path}"

    def resume_token(self) -> str | None:
        return self._token

    def listing_was_complete(self) -> bool:
        """True after a listing of every file (no token, an unknown one, or a force-push),
        so that sync prunes what it did not list; False after a listing of changes."""
        return self._complete

    async def documents(self, since: str | None = None) -> AsyncIterator[SourceItem]:
        """Fetch, then yield what changed since ``since`` (a commit this source handed out),
        or everything. Raises SourceError before yielding anything when the fetch fails."""
        self._token, self._complete = None, False
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
        self._token, self._complete = head, changes.complete

    # -- planning --------------------------------------------------------------------

    def _connect(self) -> Repository:
        remote = parse_remote_url(self.config.url, allow_private_hosts=self.config.allow_private_hosts)
        token = read_token(self.config.token_env, self.config.token_file, self.name, self.config.token)
        if token and not _token_transport_ok(remote.scheme, self.config):
            token = None
        if self.config.ssh_key_file is not None and not self.config.ssh_key_file.is_file():
            raise ConfigError(f"source {self.name!r}: ssh_key_file {self.config.ssh_key_file} is not a file")
        auth = GitAuth(
            remote,
            known_hosts_file=self.known_hosts_file,
            strict_host_key_checking=self.config.strict_host_key_checking,
            ssh_key_file=self.config.ssh_key_file,
            token=token,
        )
        return Repository(self.name, self.repo_dir, auth, self.config.branch)

    def _plan(self, git: Repository, since: str | None, head: str) -> _Changes:
        tree = git.list_tree(head, self.config.path)
        wanted = {path: entry for path, entry in tree.items() if self._selected(path)}
        old = since if since and _COMMIT_ID.match(since) and git.has_commit(since) else None
        if old is not None and git.is_ancestor(old, head):
            changed, deleted = git.diff(old, head, self.config.path)
            updated = [(path, wanted[path][1]) for path in changed if path in wanted]
            return _Changes(updated, deleted, {path: wanted[path][0] for path, _ in updated}, complete=False)
        # A force-push, a token lore does not have, or no token (a first listing, or sync
        # re-chunking everything): every file, and no tombstones. The listing says it was
        # complete (``listing_was_complete``), so sync prunes what it lacks, under the same
        # mass-delete guard as any complete listing (a force-push to an empty branch).
        updated = [(path, entry[1]) for path, entry in sorted(wanted.items())]
        return _Changes(updated, [], {path: entry[0] for path, entry in wanted.items()}, complete=True)

    def _relative(self, repo_path: str) -> str:
        prefix = self.config.path
        return repo_path[len(prefix) + 1 :] if prefix else repo_path

    def _selected(self, repo_path: str) -> bool:
        relative = self._relative(repo_path)
        return bool(self._include.match_file(relative)) and not self._exclude.match_file(relative)

    # -- reading ---------------------------------------------------------------------

    def _read_batch(
        self,
        git: Repository,
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
                items.append(SourceFailure(uri, too_large(content, self.config.max_file_bytes)))
                continue
            if PurePosixPath(path).suffix.lower() in CONVERTED_SUFFIXES:
                items.append(self._converted(path, content, blobs[path], dates[path]))
                continue
            text = decode_text(uri, content)
            if isinstance(text, SourceFailure):
                items.append(text)
            else:
                items.append(self._document(path, text, blobs[path], dates[path]))
        return items

    def _converted(
        self, repo_path: str, data: bytes, blob_id: str, updated_at: datetime
    ) -> Document | SourceFailure:
        """A PDF, DOCX or HTML file as its Markdown (``lore.extract``, as the filesystem
        source converts them); the revision is the blob id with the converter's version, so
        a better converter reaches unchanged files."""
        try:
            found = extract(data, repo_path, max_bytes=self.config.max_file_bytes)
        except ExtractionError as err:
            return SourceFailure(self.uri_for(repo_path), err.reason)
        revision = f"{blob_id}+extract-{EXTRACTION_VERSION}"
        document = self._document(repo_path, found.markdown, revision, updated_at)
        return replace(document, title=found.title or document.title, media_type=found.media_type)

    def _document(self, repo_path: str, text: str, blob_id: str, updated_at: datetime) -> Document:
        # the commit time is the truth here: front-matter dates do not override it
        return file_document(
            self.uri_for(repo_path), PurePosixPath(self._relative(repo_path)), text,
            revision=blob_id, updated_at=updated_at, labels=self.labels, front_matter_dates=False,
        )  # fmt: skip


@dataclass(frozen=True, slots=True)
class _Changes:
    #: (repository path, blob id) to read, in order.
    updated: list[tuple[str, str]]
    deleted: list[str]
    #: Repository path -> git file mode, for the paths in ``updated``.
    modes: dict[str, str]
    #: Every file of the tree is in ``updated``: a listing sync may prune after.
    complete: bool
