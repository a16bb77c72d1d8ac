"""From an alert to ranked runbook sections, with the evidence for each.

Evidence, strongest first (each adds to a passage's score, see ``_score``):

1. ``annotation``: the alert's ``runbook_url`` / ``runbook`` names this document
   (``[[alerts.runbook_urls]]`` map URL prefixes to sources; without a rule, the URL's
   last path segment must equal the file name); ``anchor`` when its ``#fragment`` is
   this section's heading (GitHub-style slug).
2. ``name``: the ``alertname`` equals the document's title, file name, one of its
   front-matter ``alerts:``, or a heading of this section; ``mention`` when it appears
   whole in the section's text (``lore.named``). Either is evidence no confidence gate
   discards: the answer is never withheld when such a section exists.
3. ``labels``: the alert's ``service`` / ``namespace`` / ``job`` / ``severity`` (the
   configured ``boost_labels``) equal a label the document carries.
4. ``text``: the summary and description, cleaned of template residue, searched in the
   retriever's default mode.

Only the ``KnowledgeRetriever`` protocol is used (a few searches per alert), so every
backend answers alerts. The sum is multiplied by the passage's source priority
(``lore.priority``: the built-in pack yields to the team's own runbook with comparable
evidence). A hand-written scorer: the evidence is a handful of booleans and
ranks, which no library ranks better than a sum with documented weights.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from urllib.parse import unquote, urlsplit

from lore.access import AccessFilter
from lore.alerts.parse import Alert, AlertQuery, clean_text
from lore.arrange import merged as merged_runs
from lore.confidence import Confidence, best, passage_confidence
from lore.config import AlertSettings, RunbookUrlRule
from lore.models import LABEL_VALUE_SEPARATOR, SOURCE_LABEL, Passage, SearchMode
from lore.named import headings, is_named, mentions, normal
from lore.priority import Weights, prioritised, weight_of
from lore.protocols import KnowledgeRetriever
from lore.tool.policy import ToolPolicy

#: Candidates asked of the retriever per search.
DEPTH = 40
#: Passages of one document in an answer, so that a notification's other runbooks show.
PER_DOCUMENT = 3

#: A passage found by an alert's text alone is listed under that alert down to this rank.
ATTRIBUTE_TEXT_RANK = 3
#: Evidence kinds, in the order results list them.
EVIDENCE_ORDER = ("annotation", "anchor", "name", "mention", "labels", "text")
#: A mention weighs a little less than a name, so that within one source a runbook
#: declared for the alert stays first, and more than the pack's name at its default
#: priority (6 x 0.75): a team page that names the alert in its text beats a generic one.
_WEIGHTS = {"annotation": 8.0, "anchor": 4.0, "name": 6.0, "mention": 5.5}
_LABEL_WEIGHT = 0.5


@dataclass
class AlertHit:
    """One passage of the answer: what matched, for which alerts."""

    passage: Passage
    score: float = 0.0
    evidence: set[str] = field(default_factory=set)
    matched_labels: dict[str, str] = field(default_factory=dict)
    alerts: list[str] = field(default_factory=list)
    text_rank: int | None = None
    #: The verdict (``lore.confidence``) of each search that found the passage, for the
    #: evidence that search measured: the alert's text, its name, its runbook URL's words.
    verdicts: list[Confidence] = field(default_factory=list)

    @property
    def confidence(self) -> str:
        """high: the alert itself names this runbook (annotation or exact name); at least
        medium when its name appears whole in the section. Otherwise the best verdict of the
        searches that found it (``lore.confidence``, the one ``knowledge_search`` gives the
        passage for the same words), at least medium when the labels match too and the
        text ranks it near the top; low when the backend reports no evidence."""
        if self.evidence & {"annotation", "name"}:
            return "high"
        found = self.search_confidence
        if "mention" in self.evidence:
            return found if found == Confidence.HIGH.value else Confidence.MEDIUM.value
        if "labels" in self.evidence and self.text_rank is not None and self.text_rank <= 3:
            return found if found == Confidence.HIGH.value else Confidence.MEDIUM.value
        return found

    @property
    def named(self) -> bool:
        """The alert itself names this runbook (its annotation, its exact name, or its name
        in the section's text): evidence no confidence gate discards."""
        return bool(self.evidence & {"annotation", "name", "mention"})

    @property
    def search_confidence(self) -> str:
        """The best verdict of the searches that found the passage (``unknown`` evidence
        counts as low, as before); none when no search did."""
        # A hit made by hand from the text search's passage carries that search's verdict.
        verdicts = self.verdicts or ([passage_confidence(self.passage)] if self.text_rank is not None else [])
        if not verdicts:
            return Confidence.NONE.value
        verdict = best(Confidence.LOW if v is Confidence.UNKNOWN else v for v in verdicts)
        return verdict.value

    @property
    def text_confidence(self) -> str:
        """Kept for callers that ask for the text's verdict: the searches' best."""
        return self.search_confidence

    def ordered_evidence(self) -> list[str]:
        return [kind for kind in EVIDENCE_ORDER if kind in self.evidence]


@dataclass(frozen=True)
class RunbookTarget:
    """Where a runbook URL points: a uri (when a rule maps it) or a file-name stem."""

    uri: str | None
    stem: str
    anchor: str | None
    source: str | None


def runbook_target(url: str, policy: ToolPolicy) -> RunbookTarget:
    parts = urlsplit(url.strip())
    anchor = unquote(parts.fragment) or None
    bare = url.strip().split("#", 1)[0]
    path = unquote(parts.path).rstrip("/")
    stem = _stem(PurePosixPath(path).name)
    for rule in policy.alerts.runbook_urls:
        if bare.startswith(rule.prefix):
            rest = unquote(bare[len(rule.prefix) :]).strip("/")
            return RunbookTarget(_source_uri(rule, rest, policy.source_types), stem, anchor, rule.source)
    return RunbookTarget(None, stem, anchor, None)


def _source_uri(rule: RunbookUrlRule, rest: str, source_types: Mapping[str, str]) -> str:
    """The uri the source gives that path: ``git://name@path`` for git, else
    ``file://name/path`` (filesystem and upload sources)."""
    path = rule.path_prefix + rest
    kind = source_types.get(rule.source, "filesystem")
    return f"git://{rule.source}@{path}" if kind == "git" else f"file://{rule.source}/{path}"


def _stem(name: str) -> str:
    return normal(name.rsplit(".", 1)[0] if "." in name else name)


def slug(heading: str) -> str:
    """GitHub's heading anchor: lower case, punctuation dropped, spaces to hyphens."""
    text = unicodedata.normalize("NFKC", heading).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _same_uri(uri: str, wanted: str) -> bool:
    # Runbook sites lower-case pages and drop ".md"; a trailing slash means the same page.
    def normal(value: str) -> str:
        value = value.lower().rstrip("/")
        return value.removesuffix(".md").removesuffix(".markdown")

    return normal(uri) == normal(wanted)


def _label_matches(passage: Passage, alert: Alert, boost: Sequence[str]) -> dict[str, str]:
    matched = {}
    for key in boost:
        value = alert.labels.get(key)
        held = passage.labels.get(key)
        if value and held and value.lower() in (v.strip().lower() for v in held.split(LABEL_VALUE_SEPARATOR)):
            matched[key] = value
    return matched


@dataclass
class RetrievalReport:
    """What the retrievals of one lookup said about themselves: why any was degraded (the
    query could not be embedded, the ``[fallback]`` index answered) and which index
    answered, so the alert tool's answer says it as ``knowledge_search``'s does."""

    degraded_reason: str | None = None
    served_by: str | None = None

    async def retrieve(
        self,
        retriever: KnowledgeRetriever,
        query: str,
        *,
        top_k: int,
        access: AccessFilter | None,
        mode: SearchMode | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> list[Passage]:
        found = await retriever.retrieve(query, top_k=top_k, labels=labels, mode=mode, access=access)
        self.degraded_reason = self.degraded_reason or found.degraded_reason
        # Served by the fallback if any retrieval of the lookup was.
        if found.served_by and (self.served_by is None or found.served_by.startswith("fallback:")):
            self.served_by = found.served_by
        return found.passages


class _Collector:
    """Hits of one alert, by chunk id."""

    def __init__(self, weights: Weights) -> None:
        self.hits: dict[str, AlertHit] = {}
        self.annotation_rank: dict[str, int] = {}
        self.name_rank: dict[str, int] = {}
        self.weights = weights

    def add(self, passages: Sequence[Passage]) -> list[AlertHit]:
        """The hits of one search's passages, in the order the sources' priorities give
        them, each with that search's verdict."""
        added = []
        for passage in prioritised(passages, self.weights):
            hit = self.hits.setdefault(passage.chunk_id, AlertHit(passage=passage))
            hit.verdicts.append(passage_confidence(passage))
            added.append(hit)
        return added


async def _for_alert(
    alert: Alert,
    retriever: KnowledgeRetriever,
    policy: ToolPolicy,
    access: AccessFilter | None,
    report: RetrievalReport,
) -> dict[str, AlertHit]:
    collected = _Collector(policy.source_weights)
    text = clean_text(alert.text)
    name = alert.alertname
    if text:
        found = await report.retrieve(retriever, text, top_k=DEPTH, access=access)
        for rank, hit in enumerate(collected.add(found), start=1):
            hit.text_rank = rank
    if name:
        # The name is an identifier: BM25's identifier field matches it whole.
        mode = SearchMode.BM25 if SearchMode.BM25 in retriever.modes else None
        found = await report.retrieve(retriever, name, top_k=DEPTH, mode=mode, access=access)
        for rank, hit in enumerate(collected.add(found), start=1):
            collected.name_rank[hit.passage.chunk_id] = rank
    target = runbook_target(alert.runbook_url, policy) if alert.runbook_url else None
    if target is not None:
        words = " ".join(part for part in (target.anchor or "", name or "", text) if part).replace("-", " ")
        labels = {SOURCE_LABEL: target.source} if target.source else None
        found = await report.retrieve(
            retriever, words or target.stem, top_k=DEPTH, labels=labels, access=access
        )
        for rank, hit in enumerate(collected.add(found), start=1):
            collected.annotation_rank[hit.passage.chunk_id] = rank
    for hit in collected.hits.values():
        _judge(hit, alert, target, policy.alerts, collected)
    # A passage is filed under this alert when the alert names it; when nothing does,
    # under the passages its text ranks near the top. A text match alone must not file
    # another alert's runbook under this one.
    named = any(hit.named for hit in collected.hits.values())
    for hit in collected.hits.values():
        near = hit.text_rank is not None and hit.text_rank <= ATTRIBUTE_TEXT_RANK
        if hit.named or (not named and near):
            hit.alerts = [alert.key()]
    return collected.hits


def _judge(
    hit: AlertHit, alert: Alert, target: RunbookTarget | None, config: AlertSettings, collected: _Collector
) -> None:
    passage = hit.passage
    if target is not None:
        named = (
            _same_uri(passage.uri, target.uri)
            if target.uri is not None
            else bool(target.stem) and _stem(PurePosixPath(passage.uri).name) == target.stem
        )
        if named:
            hit.evidence.add("annotation")
            if target.anchor and any(slug(h) == slug(target.anchor) for h in headings(passage)):
                hit.evidence.add("anchor")
    if alert.alertname and is_named(passage, alert.alertname):
        hit.evidence.add("name")
    elif alert.alertname and mentions(passage, alert.alertname):
        hit.evidence.add("mention")
    hit.matched_labels = _label_matches(passage, alert, config.boost_labels)
    if hit.matched_labels:
        hit.evidence.add("labels")
    if hit.text_rank is not None:
        hit.evidence.add("text")
    hit.score = _score(hit, collected)


def _score(hit: AlertHit, collected: _Collector) -> float:
    """Evidence weights, then ranks to order passages with the same evidence: the text's
    rank counts most, then the runbook-URL search (its query carries the anchor's words),
    then the name's BM25 rank."""
    chunk = hit.passage.chunk_id
    score = sum(_WEIGHTS.get(kind, 0.0) for kind in hit.evidence)
    score += _LABEL_WEIGHT * len(hit.matched_labels)
    for rank, weight in (
        (hit.text_rank, 2.0),
        (collected.annotation_rank.get(chunk), 1.0),
        (collected.name_rank.get(chunk), 1.0),
    ):
        if rank is not None:
            score += weight / (1 + rank)
    return score * weight_of(hit.passage, collected.weights)


async def find_runbooks(
    query: AlertQuery,
    retriever: KnowledgeRetriever,
    policy: ToolPolicy,
    top_k: int,
    access: AccessFilter | None = None,
    report: RetrievalReport | None = None,
) -> list[AlertHit]:
    """The best ``top_k`` passages over every alert of the notification; a passage that
    answers several alerts is listed once, with all of them, so alerts sharing a runbook
    come out grouped under it. ``access``: what the caller may read, filtered inside
    every retrieval (``lore.access``). ``report`` collects what the retrievals said about
    themselves (degraded, served by the fallback)."""
    report = report if report is not None else RetrievalReport()
    merged: dict[str, AlertHit] = {}
    for alert in query.alerts:
        for chunk, hit in (await _for_alert(alert, retriever, policy, access, report)).items():
            known = merged.get(chunk)
            if known is None:
                merged[chunk] = hit
                continue
            known.alerts.extend(a for a in hit.alerts if a not in known.alerts)
            known.evidence |= hit.evidence
            known.matched_labels.update(hit.matched_labels)
            known.score = max(known.score, hit.score)
            if hit.text_rank is not None:
                known.text_rank = min(known.text_rank or hit.text_rank, hit.text_rank)
    ranked = _one_passage_per_run(
        sorted(merged.values(), key=lambda hit: (-hit.score, hit.passage.uri, hit.passage.chunk_id)),
        policy.safety.max_passage_chars,
    )
    kept: list[tuple[int, AlertHit]] = []
    per_document: dict[str, int] = {}
    for hit in ranked:
        seen = per_document.get(hit.passage.uri, 0)
        if seen < PER_DOCUMENT:
            per_document[hit.passage.uri] = seen + 1
            kept.append((seen, hit))
    # Runbooks the alerts name come first, one section of each before the second of any,
    # so that every alert of a notification has its runbook near the top.
    kept.sort(key=lambda item: (not item[1].named, item[0] if item[1].named else 0))
    return [hit for _, hit in kept[:top_k]]


def _one_passage_per_run(ranked: list[AlertHit], max_chars: int) -> list[AlertHit]:
    """``ranked`` with consecutive chunks of one section shown as one passage
    (``lore.arrange.merged``) at the best one's place; the alerts the others answered
    are listed under it."""
    shown = merged_runs([hit.passage for hit in ranked], max_chars=max_chars)
    if len(shown) == len(ranked):
        return ranked
    by_chunk = {hit.passage.chunk_id: hit for hit in ranked}
    kept = [by_chunk[passage.chunk_id] for passage in shown]
    for hit, passage in zip(kept, shown, strict=True):
        hit.passage = passage
    kept_ids = {passage.chunk_id for passage in shown}
    for hit in ranked:
        if hit.passage.chunk_id in kept_ids:
            continue
        place = (hit.passage.uri, hit.passage.section)
        into = next(k for k in kept if (k.passage.uri, k.passage.section) == place)
        into.alerts.extend(alert for alert in hit.alerts if alert not in into.alerts)
    return kept


@dataclass
class RunbookGroup:
    """One runbook of the answer, with the alerts it answers (a notification's alerts
    that share a runbook land in one group)."""

    uri: str
    title: str
    ranks: list[int] = field(default_factory=list)
    alerts: list[str] = field(default_factory=list)
    confidence: str = "low"
    #: Those of ``alerts`` the notification says are resolved (their runbook is still
    #: given: the follow-up, a postmortem, needs it).
    resolved: list[str] = field(default_factory=list)
    #: The name of the Agent Skill this runbook is served as (``lore.skills``), when it
    #: is one: an agent loads the whole procedure by it in one step.
    skill: str | None = None


_CONFIDENCE_ORDER = {"high": 0, "medium": 1, "low": 2, "none": 3}


def groups(
    hits: Sequence[AlertHit], resolved: Collection[str] = (), shown: Sequence[tuple[str, str]] | None = None
) -> list[RunbookGroup]:
    """The answer by runbook, each in the order of its best passage; ``resolved``: the keys
    (``Alert.key``) of the alerts that are resolved; ``shown``: each hit's uri and title as
    the safety chain returned them (a title is indexed text: a group shows the cleaned
    one, never the stored one)."""
    by_uri: dict[str, RunbookGroup] = {}
    for rank, hit in enumerate(hits, start=1):
        uri, title = shown[rank - 1] if shown is not None else (hit.passage.uri, hit.passage.title)
        group = by_uri.setdefault(hit.passage.uri, RunbookGroup(uri, title))
        group.ranks.append(rank)
        group.alerts.extend(a for a in hit.alerts if a not in group.alerts)
        group.resolved.extend(a for a in hit.alerts if a in resolved and a not in group.resolved)
        if _CONFIDENCE_ORDER[hit.confidence] < _CONFIDENCE_ORDER[group.confidence]:
            group.confidence = hit.confidence
    return list(by_uri.values())


def answer_confidence(hits: Sequence[AlertHit]) -> str:
    """The answer's confidence: its most confident passage's, ``none`` when nothing was found."""
    return min((hit.confidence for hit in hits), key=_CONFIDENCE_ORDER.__getitem__, default="none")
