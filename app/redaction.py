"""What a message or a log line may show of a URL that can carry a secret.

A Redis URL holds its password (``redis://:PASSWORD@host:6379/0``, a Sentinel's in
``?sentinel_password=``), and an API URL may hold credentials too
(``https://user:PASSWORD@host``). Scrollback and CI logs are read by more people
than the ones allowed to connect, so every message that names such a URL shows
:func:`redacted` of it: where it points, never what opens it. The settings' own
errors never echo a secret value at all (:mod:`app.settings`).
"""

from __future__ import annotations

import re

MASK = "***"
# a query option whose value is a credential (redis-py's sentinel_password, a token=...)
_SECRET_OPTION = re.compile(r"(?i)([?&][^=&]*(?:password|secret|token|key)[^=&]*=)[^&]*")
_MASKED_OPTION = rf"\g<1>{MASK}"


def redacted(url: str) -> str:
    """``url`` with its password (or a bare userinfo) and secret query values masked.

    ``redis://:pw@h:6379/0`` -> ``redis://:***@h:6379/0``; ``redis://user:pw@h`` ->
    ``redis://user:***@h``; ``redis://pw@h`` (redis-py reads a lone userinfo as a user,
    careless hands write a password there) -> ``redis://***@h``. The last ``@`` ends the
    userinfo, so a password with a raw ``@``, ``/`` or ``?`` in it is still masked whole
    (at worst a little more than the password is). Text that is not a URL is returned
    unchanged.
    """
    scheme, separator, rest = url.partition("://")
    if not separator:
        return url
    userinfo, at, place = rest.rpartition("@")
    if at:
        user, colon, _ = userinfo.partition(":")
        # a userinfo with a path or query inside it is not a user name: mask all of it
        shown_user = user if colon and not re.search(r"[/?#]", user) else ""
        rest = f"{shown_user}:{MASK}@{place}" if shown_user or colon else f"{MASK}@{place}"
    return f"{scheme}://{_SECRET_OPTION.sub(_MASKED_OPTION, rest)}"
