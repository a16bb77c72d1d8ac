"""Alerts as lore reads them: an Alertmanager webhook, one alert, or pasted alert text.

Every input becomes one ``AlertQuery`` (one or more ``Alert``), or a ``QueryError`` whose
one line says what is wrong. Accepted:

- an Alertmanager webhook payload, version 4 (``{"version": "4", "alerts": [...],
  "groupLabels": ..., ...}``; Grafana's webhook has the same shape);
- one alert (``{"labels": ..., "annotations": ...}``), a list of them (Alertmanager's
  ``/api/v2/alerts``), or Prometheus's ``/api/v1/alerts`` answer (``{"data": {"alerts"}}``);
- pasted text: a notification title such as ``[FIRING:1] KubeNodeNotReady (node-3
  critical)`` followed by lines of description, ``key: value`` / ``- key = value``
  label and annotation lines as Alertmanager's default templates print them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from lore.errors import QueryError

#: Annotations that name the alert's runbook, in the order they are looked for.
RUNBOOK_ANNOTATIONS = ("runbook_url", "runbook")
#: Annotations whose text says what is wrong (``message``: older kube-prometheus rules).
TEXT_ANNOTATIONS = ("summary", "description", "message")
#: Longest pasted alert or payload accepted: a notification is a few KB.
MAX_INPUT_CHARS = 200_000
#: Most alerts one request may carry. Each alert is looked up on its own (its runbook
#: links, its labels, its words), so a notification of thousands held the server's CPU for
#: minutes; Alertmanager's ``max_alerts`` (webhook_config) keeps a notification within it.
MAX_ALERTS = 100


@dataclass(frozen=True)
class Alert:
    labels: Mapping[str, str]
    annotations: Mapping[str, str] = field(default_factory=dict)
    #: ``firing`` or ``resolved`` when the input says.
    status: str | None = None
    fingerprint: str | None = None
    generator_url: str | None = None

    @property
    def alertname(self) -> str | None:
        return self.labels.get("alertname") or None

    @property
    def runbook_url(self) -> str | None:
        return next((self.annotations[key] for key in RUNBOOK_ANNOTATIONS if self.annotations.get(key)), None)

    @property
    def text(self) -> str:
        """Summary and description (or message), the alert's own words."""
        return " ".join(self.annotations[key] for key in TEXT_ANNOTATIONS if self.annotations.get(key))

    def key(self) -> str:
        """How results name this alert: its name, and the fingerprint when there is one."""
        name = self.alertname or "alert"
        return f"{name} ({self.fingerprint})" if self.fingerprint else name


@dataclass(frozen=True)
class AlertQuery:
    alerts: tuple[Alert, ...]
    #: The notification's group labels (webhook only).
    group_labels: Mapping[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        """One line for the audit record and the result's ``query``."""
        parts = []
        for alert in self.alerts:
            words = clean_text(alert.text)
            parts.append(
                f"{alert.alertname}: {words}" if alert.alertname and words else alert.alertname or words
            )
        return " | ".join(part for part in parts if part) or "(alert without name or text)"


class _WireAlert(BaseModel):
    model_config = ConfigDict(extra="ignore")

    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    status: str | None = None
    fingerprint: str | None = None
    generatorURL: str | None = None

    def alert(self) -> Alert:
        # Prometheus's /api/v1/alerts says "state", Alertmanager's v2 API a status object.
        return Alert(
            labels=self.labels,
            annotations=self.annotations,
            status=self.status,
            fingerprint=self.fingerprint,
            generator_url=self.generatorURL,
        )


class _Webhook(BaseModel):
    model_config = ConfigDict(extra="ignore")

    version: str | None = None
    #: ``firing`` or ``resolved``: the group's status, for an alert that does not say.
    status: str | None = None
    alerts: list[_WireAlert]
    groupLabels: dict[str, str] = Field(default_factory=dict)
    commonLabels: dict[str, str] = Field(default_factory=dict)
    commonAnnotations: dict[str, str] = Field(default_factory=dict)


def parse_alert_input(raw: str) -> AlertQuery:
    """A payload file's or stdin's content: JSON when it looks like JSON, else alert text."""
    if len(raw) > MAX_INPUT_CHARS:
        raise QueryError(f"alert input is {len(raw)} characters; at most {MAX_INPUT_CHARS} are read")
    stripped = raw.strip()
    if not stripped:
        raise QueryError("alert input is empty: give a webhook payload, an alert, or alert text")
    if looks_like_json(stripped):
        try:
            data = json.loads(stripped)
        except (ValueError, RecursionError) as err:
            where = (
                f" (line {err.lineno}, column {err.colno})" if isinstance(err, json.JSONDecodeError) else ""
            )
            raise QueryError(f"alert input looks like JSON but is not valid JSON{where}") from None
        return parse_payload(data)
    return parse_text(stripped)


def looks_like_json(text: str) -> bool:
    """An object or a list, not a notification title (``[FIRING:1] ...`` starts with "[")."""
    return text[:1] == "{" or (text[:1] == "[" and _TITLE.match(text.splitlines()[0]) is None)


def parse_payload(data: object) -> AlertQuery:
    """A decoded JSON payload (see the module docstring for the shapes)."""
    if isinstance(data, dict) and isinstance(data.get("data"), dict) and "alerts" in data["data"]:
        data = data["data"]["alerts"]  # Prometheus /api/v1/alerts
    if isinstance(data, list):
        data = {"alerts": data}
    if not isinstance(data, dict):
        raise QueryError("alert payload must be a JSON object (a webhook or one alert) or a list of alerts")
    if "alerts" not in data:
        if not data.keys() & {"labels", "annotations"}:
            raise QueryError(
                "alert payload has neither 'alerts' (a webhook) nor 'labels'/'annotations' (an alert)"
            )
        data = {"alerts": [data]}
    try:
        webhook = _Webhook.model_validate(data)
    except ValidationError as err:
        raise QueryError(f"invalid alert payload: {_first_problem(err)}") from None
    if webhook.version is not None and webhook.version != "4":
        raise QueryError(
            f"unsupported Alertmanager webhook version {webhook.version!r} (lore reads version 4)"
        )
    if not webhook.alerts:
        raise QueryError("the notification holds no alerts")
    if len(webhook.alerts) > MAX_ALERTS:
        raise QueryError(
            f"the notification holds {len(webhook.alerts)} alerts; at most {MAX_ALERTS} are read per "
            "request (set max_alerts in Alertmanager's webhook_config)"
        )
    alerts = []
    group_status = _status(webhook.status)
    for number, wire in enumerate(webhook.alerts):
        # Common labels and annotations fill what an alert omits (some senders strip them).
        alert = wire.alert()
        labels = {**webhook.commonLabels, **alert.labels}
        annotations = {**webhook.commonAnnotations, **alert.annotations}
        if not labels.get("alertname") and not any(annotations.get(key) for key in TEXT_ANNOTATIONS):
            raise QueryError(
                f"alerts.{number}: neither an 'alertname' label nor a summary/description annotation"
            )
        status = _status(alert.status) or group_status
        alerts.append(Alert(labels, annotations, status, alert.fingerprint, alert.generator_url))
    return AlertQuery(alerts=tuple(alerts), group_labels=webhook.groupLabels)


def _status(value: str | None) -> str | None:
    """``firing`` / ``resolved`` as the input spells it (``RESOLVED``, ``Resolved``); other
    words (Prometheus's API answers ``"status": "success"``) say nothing of the alert."""
    word = (value or "").strip().lower()
    return word if word in ("firing", "resolved") else None


def from_pairs(labels: Mapping[str, str], annotations: Mapping[str, str]) -> AlertQuery:
    """``--label k=v --annotation k=v`` (or the tool's ``labels`` / ``annotations``)."""
    return parse_payload({"labels": dict(labels), "annotations": dict(annotations)})


def _first_problem(err: ValidationError) -> str:
    problem = err.errors()[0]
    where = ".".join(str(part) for part in problem["loc"]) or "payload"
    return f"{where}: {problem['msg']}"


# -- pasted text ------------------------------------------------------------------------

#: Alertmanager's default title: ``[FIRING:2] <group label values> (<other common values>)``.
_TITLE = re.compile(r"^\[(?P<status>FIRING|RESOLVED)(?::\d+)?\]\s*(?P<rest>.*)$", re.IGNORECASE)
#: ``- alertname = KubeNodeNotReady`` (default email/Slack templates) or ``summary: ...``.
_PAIR = re.compile(r"^\s*[-*•]?\s*(?P<key>[A-Za-z_][A-Za-z0-9_]*)\s*(?:=|:)\s*(?P<value>\S.*)$")
_IDENTIFIER = re.compile(r"^[A-Za-z][A-Za-z0-9_:.-]*$")
_RUNBOOK_LINK = re.compile(r"https?://\S*runbook\S*", re.IGNORECASE)
#: Section words of the default templates, not content.
_TEMPLATE_WORDS = frozenset({"labels", "annotations", "source", "alerts firing", "alerts resolved"})


def parse_text(text: str) -> AlertQuery:
    """Pasted alert text: a title line, ``key: value`` lines, and free description."""
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    prose: list[str] = []
    status: str | None = None
    for number, line in enumerate(text.splitlines()):
        line = line.strip()
        if not line or line.rstrip(":").lower() in _TEMPLATE_WORDS:
            continue
        title = _TITLE.match(line) if number == 0 or status is None else None
        if title:
            status = title["status"].lower()
            _read_title(title["rest"], labels, prose)
            continue
        pair = _PAIR.match(line)
        if pair and not pair["value"].startswith("//"):  # "https://..." is not a pair
            key, value = pair["key"], pair["value"].strip()
            if key.lower() in (*TEXT_ANNOTATIONS, *RUNBOOK_ANNOTATIONS):
                annotations[key.lower()] = value
            else:
                labels[key] = value
            continue
        if link := _RUNBOOK_LINK.search(line):
            annotations.setdefault("runbook_url", link.group(0).rstrip(").,>"))
        prose.append(line)
    if prose:
        described = annotations.get("description")
        annotations["description"] = " ".join([*([described] if described else []), *prose])
    if not labels.get("alertname") and not any(annotations.get(key) for key in TEXT_ANNOTATIONS):
        raise QueryError("no alert found in the text: expected an alert name or a description")
    return AlertQuery(alerts=(Alert(labels=labels, annotations=annotations, status=status),))


def _read_title(rest: str, labels: dict[str, str], prose: list[str]) -> None:
    """``KubeNodeNotReady (node-3 critical)``: the first word is the alert name when it
    looks like one; the parenthesised label values are kept as text (their keys are lost)."""
    head, _, tail = rest.partition("(")
    words = head.split()
    if words and _IDENTIFIER.match(words[0]):
        labels.setdefault("alertname", words[0])
        words = words[1:]
    extra = " ".join([*words, tail.rstrip(")")]).strip()
    if extra:
        prose.append(extra)


# -- the semantic query ------------------------------------------------------------------

_GO_TEMPLATE = re.compile(r"\{\{.*?\}\}", re.DOTALL)
_URL = re.compile(r"\b[a-z][a-z0-9+.-]*://\S+", re.IGNORECASE)
_IP_PORT = re.compile(r"\[?\b(?:\d{1,3}\.){3}\d{1,3}(?::\d+)?\b\]?|\b[0-9a-f:]*::[0-9a-f:]+\b", re.IGNORECASE)
_HOST_PORT = re.compile(r"\b[\w.-]+:\d{2,5}\b")
_LONG_HEX = re.compile(
    r"\b[0-9a-f]{12,}\b|\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I
)
_SPACES = re.compile(r"\s+")


def clean_text(text: str) -> str:
    """What the alert says, without what carries no meaning for a search: Go-template
    residue (``{{ $labels.instance }}``, left when a rule is pasted unexpanded), URLs,
    IP addresses and ``host:port`` pairs, ids (UUIDs, long hex)."""
    for pattern in (_GO_TEMPLATE, _URL, _IP_PORT, _HOST_PORT, _LONG_HEX):
        text = pattern.sub(" ", text)
    return _SPACES.sub(" ", text).strip(" .,;:-")


def redact_query(query: AlertQuery, redact: Callable[[str], str]) -> AlertQuery:
    """The query with ``redact`` applied to every label and annotation value:
    a token pasted into an annotation must reach neither the retriever nor the audit."""

    def clean(values: Mapping[str, str]) -> dict[str, str]:
        return {key: redact(value) for key, value in values.items()}

    alerts = tuple(
        Alert(clean(a.labels), clean(a.annotations), a.status, a.fingerprint, a.generator_url)
        for a in query.alerts
    )
    return AlertQuery(alerts=alerts, group_labels=clean(query.group_labels))
