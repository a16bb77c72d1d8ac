"""Test data shared by the conformance suite and by anyone testing retrieval: exact
identifiers with near-miss distractors, hostile query text, a small mixed corpus."""

from __future__ import annotations

#: Identifiers an on-call query pastes verbatim; each must match its document whole.
IDENTIFIERS = {
    "kube-apiserver": "Restart the kube-apiserver static pod when its serving certificate expired.",
    "etcdNoLeader": "The etcdNoLeader alert fires when a member reports no leader for a minute.",
    "CrashLoopBackOff": "A pod stuck in CrashLoopBackOff usually has a bad config map mounted.",
    "ERR_1234": "Checkout returns ERR_1234 when the card vault times out upstream.",
    "10.0.0.1": "The internal resolver listens on 10.0.0.1 and must answer within 50 ms.",
    "payments-consumer-group": "Lag on payments-consumer-group grows when a partition is stuck.",
}
#: Documents holding the pieces of those identifiers but never the identifier itself.
IDENTIFIER_DISTRACTORS = [
    "The apiserver audit log rotates daily and is shipped to the archive.",
    "etcd has no leader during an election; the leader lease is short.",
    "A crash loop with back off delays is normal right after a deploy.",
    "err 1234 and err 4321 are reserved codes that are never returned.",
    "The fallback resolver at 10.0.0.2 answers only for the legacy zone.",
    "The payments team owns the consumer group dashboards and the group alerts.",
]

#: Query text that breaks engines that pass raw text to a query parser.
HOSTILE_QUERIES = [
    '"unbalanced quote',
    "'",
    "title:restart",
    "body:*",
    "a:b:c",
    "-",
    "--",
    "-restart",
    "+restart",
    "restart AND",
    "OR",
    "NOT NOT",
    "AND OR NOT",
    "(",
    ")",
    "()",
    "((restart)",
    "[1 TO 5]",
    "{a TO b}",
    "*",
    "?",
    "rest*",
    "restart~2",
    "restart^3",
    "^",
    "\\",
    "\\\\restart",
    "/regex.*/",
    "&&",
    "||",
    "!",
    "NEAR(restart pod)",
    "restart NEAR/3 pod",
    "kube-apiserver:6443",
    "SELECT * FROM chunks; --",
    "'; DROP TABLE chunks; --",
    "%",
    "_",
    "\x00",
    "\t\n\r",
    "restart\x00pod",
    "💥🔥",
    "<script>alert(1)</script>",
    "$(rm -rf /)",
    "a" * 10_000,
    " ".join(["restart the pod"] * 800),
]

#: (uri, text) of small documents about clearly different things.
CORPUS = [
    ("runbooks/disk.md", "Disk pressure on a node: find large files and clean the image cache."),
    ("runbooks/dns.md", "DNS resolution fails: check the resolver pods and the upstream forwarders."),
    ("runbooks/tls.md", "TLS certificate rotation: renew with the issuer and reload the ingress."),
    ("runbooks/kafka.md", "Kafka broker under-replicated partitions: check broker disks and the ISR."),
    ("runbooks/redis.md", "Redis memory eviction storm: raise maxmemory or shed low-priority keys."),
]
