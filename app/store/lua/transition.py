"""A typed binding of a Lua transition: the only way a script's call is spelled out.

A :class:`Transition` names its script, builds its KEYS from :class:`QueueKeys`,
takes a named ARGV record (a ``NamedTuple`` whose field order *is* the ARGV order,
and whose field names are the ones in the script's header: a test compares them),
decodes the reply into named fields, and says whether a failover must not lose
it (``durable``: WAIT for replicas follows it when ``LEASEHOLD_REPLICA_ACKS`` asks).
A script taking groups (``ARGV[5..] id, fence, ...``) ends its record with a
``groups`` field of ``group`` records, flattened in order; one taking segments
(a shared record, then a count of records that follow it: the creates) has a
``subgroup`` too, and its groups are (record, subgroups) pairs.

The store, not its callers, turns a script's status code into the typed error
(:func:`raise_for`: ``RunNotFound``, ``InvalidTransition``, ``LeaseLost``), so
``ScriptCode`` stays inside the store. A batch write cannot raise for one of its
items: it answers one :class:`LeaseAnswer` per lease, and ``LeaseAnswer.LOST`` is
then the one spelling of "fenced out".

Each binding lives in the room that sends its script (``app/store/<room>/bindings.py``
beside ``scripts/lua/<room>/``); this module holds what they share: the binding
itself, the reply shapes several rooms use, and the code-to-exception mapping.
Adding a script: write ``scripts/lua/<room>/<name>-<keys>.lua`` with its header, and
its ARGV record, reply decoder and ``Transition`` in ``app/store/<room>/bindings.py``
(:func:`app.store.lua.registry.every_transition` finds it; a test holds the two to
each other).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Generic, NamedTuple, TypeVar

from app.errors import InvalidTransition, LeaseLost, RunNotFound
from app.store.keys import QueueKeys
from app.store.lua.registry import BINDINGS
from app.store.lua.scripts import ScriptArg, ScriptCall, ScriptCode, Scripts
from app.store.redis.connection import AsyncRedis

A = TypeVar("A", bound=tuple[Any, ...])


R = TypeVar("R")


# (the queue's keys, the run the call is about or '' for a queue-wide one, the ARGV record)
KeysOf = Callable[[QueueKeys, str, A], tuple[str, ...]]


class LeaseAnswer(StrEnum):
    """What a fenced batch write (finish, release, renew) answered for one lease.

    OK: written (renew: renewed); RETRY: requeued for another attempt (finish);
    CANCEL: a client asked to cancel (renew: renewed, stop now; finish: it ended
    cancelled instead of being retried or parked); LOST: fenced out, nothing written.
    """

    OK = "OK"
    RETRY = "RETRY"
    CANCEL = "CANCEL"
    LOST = "LOST"


@dataclass(frozen=True)
class Transition(Generic[A, R]):
    """One Lua script as Python calls it: name, KEYS, ARGV record, reply, durability."""

    name: str
    keys: KeysOf[A]
    argv: type[A]
    decode: Callable[[Any], R]
    durable: bool = False
    # the record each group of a variadic ARGV tail is (the ARGV record's last field)
    group: type[tuple[Any, ...]] | None = None
    # set: each group is a pair (a `group` record, a sequence of `subgroup` records), sent
    # as the record's fields, the count of the sequence, then its records' fields
    subgroup: type[tuple[Any, ...]] | None = None

    def __post_init__(self) -> None:
        BINDINGS[self.name] = self  # app.store.lua.registry: every room's binding

    def call(self, keys: QueueKeys, args: A, run_id: str = "") -> ScriptCall:
        """The script call for ``args`` on ``keys``' queue (``run_id``: the run it is about)."""
        return ScriptCall(
            self.name, self.keys(keys, run_id, args), self.flatten(args), self.durable
        )

    async def send(
        self, scripts: Scripts, client: AsyncRedis, keys: QueueKeys, args: A, run_id: str = ""
    ) -> R:
        """Run the script once and decode its reply (WAIT follows when it is durable)."""
        return self.decode(await scripts.run(client, self.call(keys, args, run_id)))

    def flatten(self, args: A) -> list[ScriptArg]:
        """The ARGV list: the record's fields in order, the groups' fields after them."""
        values: list[Any] = list(args)
        if self.group is None:
            return values
        groups = values.pop()
        if self.subgroup is None:
            for group in groups:
                values.extend(group)
            return values
        for head, subgroups in groups:
            values.extend(head)
            values.append(len(subgroups))
            for subgroup in subgroups:
                values.extend(subgroup)
        return values


def raise_for(
    code: str, *, run_id: str, status: str = "", action: str = "", fence: int = 0
) -> None:
    """Raise the typed error a script's status code means; return for every other code.

    The one code-to-exception mapping: NOT_FOUND is :class:`RunNotFound`, INVALID
    :class:`InvalidTransition` (``status`` says what the run is), LOST
    :class:`LeaseLost` (``fence`` is the one that no longer holds).
    """
    if code == ScriptCode.NOT_FOUND:
        raise RunNotFound(run_id)
    if code == ScriptCode.INVALID:
        raise InvalidTransition(run_id, status, action)
    if code == ScriptCode.LOST:
        raise LeaseLost(run_id, fence)


# code -> member: ``LeaseAnswer(code)`` goes through EnumType.__call__, per run of every batch
_ANSWERS = {answer.value: answer for answer in LeaseAnswer}


def _answers(reply: Sequence[str]) -> list[LeaseAnswer]:
    known = _ANSWERS.get
    # an unknown code still raises ValueError, through the enum
    return [known(code) or LeaseAnswer(code) for code in reply]


class StatusReply(NamedTuple):
    """``{code, status}``: OK (status afterwards), NOT_FOUND, INVALID (status: what it is)."""

    code: str
    status: str


def _status_reply(reply: Sequence[Any]) -> StatusReply:
    code, status = reply
    return StatusReply(code, status)


class DeclareReply(NamedTuple):
    """OK (declared now), REPLAYED (declared already), CONFLICT (max_queues reached)."""

    code: str
    declared: int


def _declare_reply(reply: Sequence[Any]) -> DeclareReply:
    code, count = reply
    return DeclareReply(code, int(count))


class CodeReply(NamedTuple):
    """``{code, value}``: a status code and one value (an id, a count, a payload)."""

    code: str
    value: str


def _code_reply(reply: Sequence[Any]) -> CodeReply:
    code, value = reply
    return CodeReply(code, "" if value is None else str(value))


def _run_keys(k: QueueKeys, run_id: str, a: Any) -> tuple[str, ...]:
    return (k.run(run_id), k.events(run_id))


"""Every binding by script name (a test holds it to ``scripts/lua``)."""
