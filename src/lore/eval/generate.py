"""Synthetic golden sets: an LLM writes one question per sampled chunk.

Any OpenAI-compatible chat-completions endpoint will do (OpenAI, vLLM, Ollama's ``/v1``,
LiteLLM, llama.cpp server): ``POST {base}/chat/completions`` with ``{model, messages,
temperature}``, answer in ``choices[0].message.content``. The chunk's document is the
gold answer. Answers that are empty, refused, or not a question are skipped and
counted, never written.

Synthetic questions echo their chunk's wording, so they flatter BM25; treat them as a
smoke test of coverage, and keep a hand-written golden set as the real yardstick.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from lore.errors import GenerationError
from lore.eval.datasets import GoldenEntry
from lore.models import Chunk
from lore.safety.secrets import redact_secrets

#: Chunks shorter than this are headings or link lists: nothing to ask about.
MIN_CHUNK_CHARS = 200
#: What the model sees of a chunk; more is rarely needed to write one question.
MAX_PROMPT_CHUNK_CHARS = 4000
MAX_QUESTION_CHARS = 300
SKIP_WORD = "SKIP"
DEFAULT_CONCURRENCY = 4

SYSTEM_PROMPT = (
    "You help evaluate a search engine over an operations team's runbooks, postmortems "
    "and design documents. Given one passage, write ONE question or search query that an "
    "on-call engineer would type while handling an incident, which this passage answers. "
    "Write it the way engineers ask: a symptom, a pasted alert or error string, or "
    "'how do I ...'. Do not quote the document title or copy whole sentences. Reply with "
    f"the question only, on one line. If the passage answers nothing useful, reply {SKIP_WORD}."
)


@dataclass(slots=True)
class GenerationResult:
    entries: list[GoldenEntry] = field(default_factory=list)
    #: Why chunks produced no question: ``{"empty answer": 2, "HTTP 500": 1}``.
    skipped: Counter[str] = field(default_factory=Counter)

    @property
    def skipped_total(self) -> int:
        return sum(self.skipped.values())


def sample_chunks(chunks: Sequence[Chunk], n: int, *, seed: int = 0) -> list[Chunk]:
    """``n`` chunks with enough text, drawn reproducibly (``seed``)."""
    usable = [chunk for chunk in chunks if len(chunk.text.strip()) >= MIN_CHUNK_CHARS]
    return random.Random(seed).sample(usable, min(n, len(usable)))


def user_prompt(chunk: Chunk) -> str:
    """What the model sees. Secrets are redacted again here (sync and ``lore eval
    generate`` already redact whole documents): a prompt leaves the machine."""
    where = " › ".join(part for part in (chunk.title, chunk.section) if part)
    return redact_secrets(f"Document: {where}\n\nPassage:\n{chunk.text[:MAX_PROMPT_CHUNK_CHARS]}")


def clean_question(answer: str) -> str | None:
    """The question from a model's answer, or None when it is unusable."""
    lines = [line.strip() for line in answer.strip().splitlines() if line.strip()]
    if not lines:
        return None
    question = lines[0].removeprefix("Question:").strip().strip("\"'`").strip()
    if not question or question.upper().startswith(SKIP_WORD):
        return None
    if len(question) < 8 or len(question) > MAX_QUESTION_CHARS:
        return None
    return question


def chat_completions_url(base_url: str) -> str:
    base = base_url.rstrip("/")
    return base if base.endswith("/chat/completions") else f"{base}/chat/completions"


class ChatClient:
    """The smallest OpenAI-compatible chat client: one prompt in, one message out."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        *,
        timeout: float = 120.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.url = chat_completions_url(base_url)
        self.model = model
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.AsyncClient(timeout=timeout, transport=transport, headers=self._headers)

    async def aclose(self) -> None:
        await self._client.aclose()

    async def complete(self, system: str, user: str) -> str:
        """The reply's text. Raises ``GenerationError`` when the endpoint is unusable,
        ``ValueError`` (with a short reason) when this one reply is."""
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
            "temperature": 0.2,
        }
        try:
            response = await self._client.post(self.url, json=body)
        except httpx.TransportError as err:
            raise GenerationError(f"cannot reach {self.url}: {err}") from err
        if response.status_code in (401, 403, 404):
            raise GenerationError(f"{self.url} answered HTTP {response.status_code}: {response.text[:200]}")
        if response.status_code >= 400:
            raise ValueError(f"HTTP {response.status_code}")
        try:
            content = response.json()["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError) as err:
            raise ValueError("malformed response") from err
        if not isinstance(content, str):
            raise ValueError("malformed response")
        return content


async def generate_golden_set(
    chunks: Sequence[Chunk],
    client: ChatClient,
    *,
    concurrency: int = DEFAULT_CONCURRENCY,
    on_chunk: Callable[[], None] | None = None,
) -> GenerationResult:
    """One question per chunk (in chunk order); the chunk's document is the answer."""
    result = GenerationResult()
    questions: list[str | None] = [None] * len(chunks)
    gate = asyncio.Semaphore(concurrency)

    async def ask(index: int, chunk: Chunk) -> None:
        async with gate:
            try:
                answer = await client.complete(SYSTEM_PROMPT, user_prompt(chunk))
            except ValueError as err:
                result.skipped[str(err)] += 1
            else:
                questions[index] = clean_question(answer)
                if questions[index] is None:
                    result.skipped["empty or unusable answer"] += 1
        if on_chunk is not None:
            on_chunk()

    try:
        async with asyncio.TaskGroup() as group:
            for index, chunk in enumerate(chunks):
                group.create_task(ask(index, chunk))
    except ExceptionGroup as failed:  # an unusable endpoint: the other requests are cancelled
        raise failed.exceptions[0] from None
    for index, (chunk, question) in enumerate(zip(chunks, questions, strict=True), start=1):
        if question is not None:
            result.entries.append(
                GoldenEntry.model_validate(
                    {"id": f"gen{index}", "question": question, "expected": [chunk.uri], "chunk": chunk.id}
                )
            )
    return result
