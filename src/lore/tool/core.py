"""The ``knowledge_search`` tool: one implementation behind every entry point.

MCP, the agent-framework adapters, the HTTP API and ``lore search`` all call
``KnowledgeSearch.run``, and the safety chain lives inside it, so no entry point can skip
it:

    arguments ─► validate ─► retrieve ─► injection screening ─► secret/PII redaction
              ─► output cap ─► audit record ─► ToolResult

``run`` never raises for bad arguments or a failed search: the agent gets a result whose
``error`` says what went wrong, and the call is audited either way.

The stages live beside this module and read top to bottom: ``arguments`` (the schema and
its validation), ``cleaning`` (screening, redaction, the cap, the shape of a passage),
``result`` (what a call returns), ``render`` (its text form). Their public names are
importable from here too, as adapters have always imported them.
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, TypeVar

from lore import startup_trace, tracing
from lore.access import AccessFilter, Principal, access_filter, principal_name
from lore.arrange import arranged, diversified
from lore.arrange import candidates as candidate_depth
from lore.confidence import Confidence, best, clears
from lore.errors import AuditError, LoreError, RerankError, UnsupportedModeError
from lore.events.record import Correlation
from lore.events.recorder import EventRecorder, event_of_call
from lore.events.timing import Timing, measure_retrieval
from lore.models import Passage, SearchMode
from lore.named import QueryJudge
from lore.observe import observe_search
from lore.priority import prioritised
from lore.protocols import KnowledgeRetriever, Reranker
from lore.safety.audit import AuditEntry, AuditHit, AuditLog
from lore.safety.audit_writer import record_entry
from lore.safety.secrets import SecretRedactor
from lore.safety.verdicts import VerdictStore

# Re-exported: where adapters, tests and benches have always found them.
from lore.tool.arguments import INPUT_SCHEMA as INPUT_SCHEMA
from lore.tool.arguments import SURROGATE, parse_arguments
from lore.tool.arguments import TOOL_DESCRIPTION as TOOL_DESCRIPTION
from lore.tool.arguments import TOOL_NAME as TOOL_NAME
from lore.tool.arguments import SearchRequest as SearchRequest
from lore.tool.cleaning import CLEAN_CACHE_SIZE as CLEAN_CACHE_SIZE
from lore.tool.cleaning import PassageCleaner
from lore.tool.limits import MAX_TOP_K as MAX_TOP_K
from lore.tool.policy import ToolPolicy as ToolPolicy
from lore.tool.result import DEGRADED_EMBEDDER_REASON as DEGRADED_EMBEDDER_REASON
from lore.tool.result import UNTRUSTED_NOTICE as UNTRUSTED_NOTICE
from lore.tool.result import Retrieved as Retrieved
from lore.tool.result import ToolMetadata as ToolMetadata
from lore.tool.result import ToolPassage as ToolPassage
from lore.tool.result import ToolResult as ToolResult

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: Candidates the retriever hands a configured reranker per call (as ``lore eval``'s
#: ``hybrid+rerank`` does), of which the reranker keeps ``top_k``.
RERANK_CANDIDATES = 50


class KnowledgeSearch:
    """The tool. Entry points hold one instance and call ``run`` per request."""

    name: str = TOOL_NAME
    description: str = TOOL_DESCRIPTION

    def __init__(
        self,
        retriever: KnowledgeRetriever,
        *,
        policy: ToolPolicy,
        audit: AuditLog,
        events: EventRecorder,
        reranker: Reranker | None = None,
        verdicts: VerdictStore | None = None,
    ) -> None:
        """Every part is built already (``lore.resolve.knowledge_search`` builds them from
        the settings): ``policy``, what the configuration decides; ``audit``, where calls
        are recorded; ``events``, the retrieval events' recorder; ``reranker``, None for
        none; ``verdicts``, where the safety chain's results are kept across processes
        (``lore.safety.verdicts``), None for this process's cache alone. An answer below
        ``policy.min_confidence`` shows no passage."""
        self._retriever = retriever
        self._policy = policy
        self._min_confidence = policy.min_confidence
        self._reranker = reranker
        self._audit = audit
        self._cleaner = PassageCleaner(policy, verdicts)
        # The query is redacted of secrets (never PII: an address in a question still
        # searches) before it reaches a retriever, then shown, audited and recorded
        # through the cleaner's redactor. Without PII rules the two are one redactor, so
        # the second redaction of a search's query is a lookup in its memory, not a
        # second round trip to the secret detector's worker process.
        pii = policy.safety.redact_emails or policy.safety.redact_phone_numbers
        self._query_redactor = SecretRedactor() if pii else self._cleaner.redactor
        # The sources' priorities (``lore.priority``): the pack yields to the team's pages.
        self._weights = policy.source_weights
        # A copy, so an adapter that decorates its schema cannot change everyone's.
        self.input_schema: dict[str, Any] = copy.deepcopy(INPUT_SCHEMA)
        self._events = events

    @property
    def retriever(self) -> KnowledgeRetriever:
        return self._retriever

    @property
    def policy(self) -> ToolPolicy:
        return self._policy

    @property
    def events(self) -> EventRecorder:
        return self._events

    @property
    def audit(self) -> AuditLog:
        """Where this tool's calls are audited; feedback on them goes there too."""
        return self._audit

    def warm_up(self) -> None:
        """What a server does before it says it is ready: the safety chain's rules built
        (the first search would build them)."""
        self._cleaner.warm_up()

    def close(self) -> None:
        """Write the queued retrieval events; the retriever is the caller's to close."""
        self._events.close()

    async def run(
        self,
        arguments: Mapping[str, Any],
        *,
        principal: Principal,
        mode: SearchMode | None = None,
    ) -> ToolResult:
        """``principal``: who is asking, always given. A service principal (a token) sees
        only what it may read (``lore.access.access_filter``), filtered inside the
        retriever; the ``LocalUser`` of the CLI sees its whole index. The audit names it."""
        return await self.run_chain(
            TOOL_NAME,
            lambda: parse_arguments(arguments, self._policy.top_k),
            lambda request: self._retrieve(request, mode, access_filter(principal)),
            principal=principal,
            mode=mode,
            raw_query=lambda: self._redact_raw_query(arguments),
        )

    async def run_chain(
        self,
        tool: str,
        prepare: Callable[[], SearchRequest],
        retrieve: Callable[[SearchRequest], Awaitable[Retrieved]],
        *,
        principal: Principal,
        mode: SearchMode | None = None,
        raw_query: Callable[[], str] = lambda: "",
        judge: Callable[[Passage], Confidence] | None = None,
        anchored: Callable[[Passage], bool] | None = None,
    ) -> ToolResult:
        """The safety chain and audit around any retrieval: ``knowledge_search`` and
        ``runbook_for_alert`` (``lore.alerts.tool``) both run through here, so a second
        tool cannot skip screening, redaction, the cap or the audit record.

        ``prepare`` validates the call (raising ``LoreError`` for bad arguments);
        ``retrieve`` returns the passages in rank order, whether a reranker ordered them
        and why the answer is degraded (or None). ``raw_query`` is what the audit records
        when ``prepare`` refused the call (already redacted). ``retrieve`` filters by the
        principal's access itself (``lore.access.access_filter``). ``judge`` gives each
        passage its confidence (by default ``QueryJudge`` of the query); when none reaches
        ``min_confidence`` no passage is shown, unless ``anchored`` says the query names
        one (its alert name or identifier is the page's, ``lore.named``): such an answer is
        never withheld.

        Traced (``lore.tracing``), the call is one span following OpenTelemetry's GenAI
        retrieval span (``retrieval <index>``, ``gen_ai.operation.name`` = retrieval, the
        index as ``gen_ai.data_source.id``, ``gen_ai.retrieval.top_k``, the returned
        chunks' ids and scores in ``gen_ai.retrieval.documents``; never the query text),
        with the embedding, each channel and the safety chain as its children."""
        if not tracing.active():
            return await self._chain(
                tool,
                prepare,
                retrieve,
                tracing.IDLE,
                principal=principal,
                mode=mode,
                raw_query=raw_query,
                judge=judge,
                anchored=anchored,
            )
        source = self._policy.index_name
        attributes: dict[str, tracing.Value] = {
            "gen_ai.operation.name": "retrieval",
            "gen_ai.data_source.id": source,
            "lore.tool": tool,
            "lore.engine": self._retriever.engine,
        }
        with tracing.span(f"retrieval {source}", attributes) as span:
            return await self._chain(
                tool,
                prepare,
                retrieve,
                span,
                principal=principal,
                mode=mode,
                raw_query=raw_query,
                judge=judge,
                anchored=anchored,
            )

    async def _chain(
        self,
        tool: str,
        prepare: Callable[[], SearchRequest],
        retrieve: Callable[[SearchRequest], Awaitable[Retrieved]],
        span: tracing.Span,
        *,
        principal: Principal,
        mode: SearchMode | None,
        raw_query: Callable[[], str],
        judge: Callable[[Passage], Confidence] | None,
        anchored: Callable[[Passage], bool] | None,
    ) -> ToolResult:
        started = time.perf_counter()
        request: SearchRequest | None = None
        degraded_reason: str | None = None
        served_by: str | None = None
        passages: list[ToolPassage] = []
        findings: Counter[str] = Counter()
        truncated = reranked = no_match = False
        answer = Confidence.NONE
        error: str | None = None
        timing: Timing | None = None
        try:
            access_filter(principal)  # a call without a principal is refused, and audited
            request = prepare()
            # A token pasted into a question must not reach a remote embedder or reranker;
            # the index holds secrets redacted the same way, so nothing is lost for search.
            request = replace(request, query=self.redact_query(request.query))
            span.set("gen_ai.retrieval.top_k", request.top_k)
            with measure_retrieval() as timing:
                found, reranked, degraded_reason, served_by = await retrieve(request)
            startup_trace.mark("retrieved")
            found = found[: request.top_k]
            if judge is None:
                query_judge = QueryJudge(request.query)
                judge, anchored = query_judge, anchored or query_judge.anchored
            levels = [judge(passage) for passage in found]
            answer = best(levels)
            # Passages that all fall short look like an answer to an agent: withhold them,
            # unless the query names one (a withheld runbook is worse than a weak answer).
            named = anchored is not None and any(anchored(passage) for passage in found)
            no_match = bool(found) and not named and not clears(answer, self._min_confidence)
            if no_match:
                found, levels = [], []
            # CPU-bound (regexes over every passage): off the event loop, on its executor,
            # unless every field's result is in the cleaner's cache (no rule runs then).
            with tracing.span("lore.safety_chain") as safety:
                cached = self._cleaner.make_safe_cached(found, levels)
                cleaned = (
                    cached
                    if cached is not None
                    else await asyncio.to_thread(self._cleaner.make_safe, found, levels)
                )
                passages, findings, truncated = cleaned
                if safety.recording:
                    _describe_safety(safety, len(found), findings, truncated)
            startup_trace.mark("screened and redacted")
        except LoreError as err:
            error = self._cleaner.redactor.redact(str(err))[0]
        except Exception as err:  # the agent gets an answer even when a backend has a bug
            logger.exception("%s failed", tool)
            error = f"{tool.replace('_', ' ')} failed unexpectedly ({type(err).__name__})"
        latency_ms = (time.perf_counter() - started) * 1000.0
        if span.recording:
            _describe_retrieval(span, passages, error, degraded_reason, no_match)
        # The mode that answered the call, also when the caller left it to the retriever
        # (the first of its modes, by the protocol): analytics group by it.
        effective = mode if mode is not None else next(iter(self._retriever.modes), None)
        # A degraded embedder degrades only the answers it took part in: not BM25's.
        embedder_degraded = self._retriever.degraded and effective is not SearchMode.BM25
        observe_search(  # the one place every tool call is counted (lore.metrics)
            tool,
            self._retriever.engine,
            effective.value if effective is not None else None,
            latency_ms / 1000.0,
            [p.score for p in passages],
            degraded=embedder_degraded or degraded_reason is not None,
            failed=error is not None,
        )

        shown_query = self._cleaner.redactor.redact(request.query)[0] if request is not None else ""
        entry = AuditEntry(
            time=datetime.now(UTC).isoformat(),
            principal=principal_name(principal),
            tool=tool,
            query=shown_query if request is not None else raw_query(),
            filters=dict(request.labels) if request is not None else {},
            top_k=request.top_k if request is not None else None,
            mode=effective.value if effective is not None else None,
            engine=self._retriever.engine,
            results=[AuditHit(rank=p.rank, uri=p.uri, chunk_id=p.chunk_id, score=p.score) for p in passages],
            latency_ms=round(latency_ms, 3),
            safety=dict(findings),
            truncated=truncated,
            error=error,
        )
        try:
            await record_entry(self._audit, entry)
        except AuditError as err:
            # Fail closed: a call that cannot be audited returns nothing.
            return ToolResult(passages=[], metadata=None, error=str(err))
        if degraded_reason is None and embedder_degraded:
            degraded_reason = DEGRADED_EMBEDDER_REASON
        reason = self._cleaner.redactor.redact(degraded_reason)[0] if degraded_reason else None
        event = event_of_call(
            entry,
            principal=principal,
            correlation=request.correlation if request is not None else Correlation(),
            timing=timing,
            degraded=reason is not None,
            degraded_reason=reason,
        )
        self._events.record(event)
        startup_trace.mark("audited")

        if request is None:
            return ToolResult(passages=[], metadata=None, error=error)
        metadata = ToolMetadata(
            query=shown_query,
            engine=self._retriever.engine,
            degraded=reason is not None,
            result_count=len(passages),
            safety=dict(findings),
            truncated=truncated,
            latency_ms=round(latency_ms, 3),
            reranker=self._reranker.model_id if self._reranker is not None else None,
            reranked=reranked,
            degraded_reason=reason,
            served_by=served_by or self._retriever.engine,
            event_id=event.event_id if self._events.enabled else None,
            confidence=answer.value,
            no_match=no_match,
            min_confidence=self._min_confidence.value,
        )
        return ToolResult(passages=passages, metadata=metadata, error=error)

    async def show_stored(
        self, tool: str, principal: Principal, target: str, shape: Callable[[Callable[[str], str]], T]
    ) -> T:
        """Indexed text shown outside a search (a document read, the documents tree): the
        chain's screening and redaction over every text ``shape`` passes through the
        function it is given, then an audit record naming ``principal``, ``tool`` and
        ``target`` (a uri), with what screening found. Fails closed: no principal, or an
        audit that cannot be written (``AuditError``), shows nothing. Not capped: a
        person reading a document reads all of it; the cap is for answers to agents."""
        access_filter(principal)  # refuses a caller that is no Principal
        started = time.perf_counter()
        findings: Counter[str] = Counter()
        shown = await asyncio.to_thread(shape, lambda text: self._cleaner.clean(text, findings))
        entry = AuditEntry(
            time=datetime.now(UTC).isoformat(),
            principal=principal_name(principal),
            tool=tool,
            query=self._cleaner.redactor.redact(target)[0],
            filters={},
            top_k=None,
            mode=None,
            engine=self._retriever.engine,
            latency_ms=round((time.perf_counter() - started) * 1000.0, 3),
            safety=dict(findings),
        )
        await record_entry(self._audit, entry)
        return shown

    async def _retrieve(
        self, request: SearchRequest, mode: SearchMode | None, access: AccessFilter | None = None
    ) -> Retrieved:
        """The passages to show, whether the reranker ordered them, and why the answer is
        degraded (BM25 alone when the query embedding failed) and which index answered.
        With a reranker, the retriever is asked for ``RERANK_CANDIDATES`` and the reranker
        picks ``top_k``; a failing reranker costs the order, not the answer (the
        retriever's is kept). The reranker only reorders candidates the retriever already
        filtered by ``access``."""
        if mode is not None and mode not in self._retriever.modes:
            offered = ", ".join(m.value for m in self._retriever.modes)
            raise UnsupportedModeError(
                f"{self._retriever.engine} does not offer {mode.value} search (offers: {offered})"
            )
        labels = request.labels or None
        shown = candidate_depth(request.top_k)
        depth = shown if self._reranker is None else max(shown, RERANK_CANDIDATES)
        found = await self._retriever.retrieve(
            request.query, top_k=depth, labels=labels, mode=mode, access=access
        )
        candidates, degraded_reason, served_by = list(found.passages), found.degraded_reason, found.served_by
        # The team's pages before the pack's, one passage per run of a section's chunks,
        # the section the question asks for first, no document taking every slot
        # (lore.arrange).
        candidates = arranged(
            candidates, request.query, self._weights, max_chars=self._policy.safety.max_passage_chars
        )
        if self._reranker is None:
            return candidates[: request.top_k], False, degraded_reason, served_by
        try:
            reranked = await self._reranker.rerank(request.query, candidates, top_k=request.top_k)
            return diversified(prioritised(reranked, self._weights)), True, degraded_reason, served_by
        except RerankError as err:
            logger.warning("reranker %s failed, keeping retrieval order: %s", self._reranker.model_id, err)
            return candidates[: request.top_k], False, degraded_reason, served_by

    def _redact_raw_query(self, arguments: Any) -> str:
        query = arguments.get("query") if isinstance(arguments, Mapping) else None
        if not isinstance(query, str):
            return ""
        limit = INPUT_SCHEMA["properties"]["query"]["maxLength"]
        # U+FFFD for a lone surrogate: the audit log is UTF-8 and must record the call.
        return self._cleaner.redactor.redact(SURROGATE.sub("\ufffd", query[:limit]))[0]

    def redact_query(self, text: str) -> str:
        """``text`` (a query, or a part of one) redacted of secrets, not of PII, as
        ``lore.safety.secrets.redact_secrets`` gives it: what a retriever is given."""
        return self._query_redactor.redact(text)[0]

    @property
    def cleaner(self) -> PassageCleaner:
        """The screening, redaction and cap stages (benches time them alone)."""
        return self._cleaner


def _describe_retrieval(
    span: tracing.Span, passages: list[ToolPassage], error: str | None, degraded: str | None, no_match: bool
) -> None:
    """The GenAI retrieval span's outcome: the chunks shown (id and score each, as the
    convention's JSON documents), and lore's own flags."""
    documents = [{"id": p.chunk_id, "score": p.score} for p in passages]
    span.set("gen_ai.retrieval.documents", json.dumps(documents))
    span.set("lore.result_count", len(passages))
    span.set("lore.degraded", degraded is not None)
    span.set("lore.no_match", no_match)
    if error is not None:
        span.fail("lore.tool_error", error)


def _describe_safety(span: tracing.Span, screened: int, findings: Counter[str], truncated: bool) -> None:
    span.set("lore.safety.passages", screened)
    for finding, count in sorted(findings.items()):
        span.set(f"lore.safety.{finding}", count)
    span.set("lore.safety.truncated", truncated)
