"""Namespace names and the key space each one owns: shared by settings, models and stores.

A namespace (a tenant) is a key space of its own: its prefix is ``<prefix>`` for the
default namespace (a single-tenant deployment keeps the keys it always had) and
``<prefix>:ns:<name>`` for any other. The key layout under a prefix is
:mod:`app.store.keys`; this module only says which prefix, so settings and models can
name a namespace without depending on the store.
"""

from __future__ import annotations

DEFAULT_NAMESPACE = "default"
# a namespace's name: short, lower case, safe in a key name, a URL and a header
NAMESPACE_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,31}$"
# the header a request names its namespace with (a key bound to one needs none)
NAMESPACE_HEADER = "Leasehold-Namespace"


def namespace_prefix(prefix: str, namespace: str) -> str:
    """The prefix of every key of ``namespace``: ``prefix`` itself for the default one.

    No default-namespace key starts with ``<prefix>:ns:`` (they continue with ``{``,
    ``queues``, ``workers``, ``worker:``, ``operation:``, ``ratelimits``, ``rl:``,
    ``schedules``, ``audit``, ``signing:``, ``quota:`` or ``namespaces``), so the
    spaces are disjoint.
    """
    return prefix if namespace == DEFAULT_NAMESPACE else f"{prefix}:ns:{namespace}"
