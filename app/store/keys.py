"""The Redis key layout. No other module builds a key name.

Every key of one queue carries the queue's hash tag, ``{<queue>}``, so every
script touches a single Redis Cluster slot::

    <prefix>:{<queue>}:run:<id>        hash    the run record
    <prefix>:{<queue>}:events:<id>     stream  the run's events (SSE id = stream id)
    <prefix>:{<queue>}:ready           list    the ring: lanes with queued runs, not blocked
    <prefix>:{<queue>}:ready@<build>   list    a build's ring: its pinned lanes
                                               ("@<build>/<lane>"), served by its workers only
    <prefix>:{<queue>}:pins:<build>    set     open runs pinned to the build
    <prefix>:{<queue>}:pinned_builds   set     builds with open pinned runs in this queue
    <prefix>:{<queue>}:lane:<lane>     zset    queued ids of one lane ("<handler>|<concurrency
                                               key>" or "!<singleton key>"), score =
                                               enqueue ms - priority boost ms
    <prefix>:{<queue>}:placed          hash    lane -> '' (in the ring) or the resource whose
                                               wait set holds it
    <prefix>:{<queue>}:wait:<res>      set     lanes blocked on a resource: h:<handler>,
                                               k:<concurrency key>, s:<singleton key>
    <prefix>:{<queue>}:blocked         set     resources with blocked lanes
    <prefix>:{<queue>}:limits          hash    q / h:<handler> / k:* / k:<key> -> limit
    <prefix>:{<queue>}:slots           hash    h:<handler> / k:<key> -> running; s:<key> -> holder
    <prefix>:{<queue>}:queued          string  how many runs sit in lanes
    <prefix>:{<queue>}:kqueued         zset    concurrency key -> queued runs of it
    <prefix>:{<queue>}:one:<key>       hash    queued -> runs of a singleton key in lanes,
                                               last -> the newest of them
    <prefix>:{<queue>}:delayed         zset    id -> epoch ms when it may run (retry backoff,
                                               delayed starts, rate holds, timed durable waits)
    <prefix>:{<queue>}:leases          zset    id -> lease expiry, epoch ms (Redis clock)
    <prefix>:{<queue>}:runs            zset    id -> created_at ms, for listing
    <prefix>:{<queue>}:unclaimed       zset    id -> epoch ms when it expires if still unclaimed
    <prefix>:{<queue>}:parked          zset    id -> parked_at ms: waiting_human and
                                               reconciliation_required runs (for counts)
    <prefix>:{<queue>}:waiting         zset    id -> epoch ms its durable wait ends by (+inf:
                                               none): runs parked `waiting` (for counts)
    <prefix>:{<queue>}:idem:<key>      string  idempotency key -> "<run id> <fingerprint>"
    <prefix>:{<queue>}:effects:<id>    hash    memoized effects: "<name>:<ordinal>" -> record
    <prefix>:{<queue>}:waits:<id>      hash    durable waits: "<kind>:<name>:<ordinal>" -> record,
                                               "inbox:<name>" -> pending signals (park_run)
    <prefix>:{<queue>}:activity        stream  every run's lifecycle events, capped (~1000)
    <prefix>:{<queue>}:claim:<owner>:<token>  string  a claim's receipt (ids, fences), for one TTL
    <prefix>:{<queue>}:handoff:idle    zset    owner -> registration expiry ms: idle workers a
                                               create may hand a run to (includes/claim.lua)
    <prefix>:{<queue>}:handoff:args    hash    owner -> "<lease ttl ms> <maxlen> <promote max>"
    <prefix>:{<queue>}:handoff:inbox:<owner>  list  claim rows (JSON) handed to that worker
    <prefix>:{<queue>}:handoff:taken:<owner>  list  rows it took (BLMOVE), until it started them
    <prefix>:{<queue>}:series:<minute>  hash  status (or lease_expired) -> runs that came to it
                                               in that epoch minute; expires after 61 min
    <prefix>:{<queue>}:rl:<bucket>     string  a start bucket's GCRA TAT (ms): gates the starts
                                               of the queue's runs that name <bucket>
    <prefix>:{<queue>}:sched:<id>      hash    a schedule whose runs go to this queue: spec,
                                               run options, version, next/last fire, counts
    <prefix>:{<queue>}:sched_due       zset    schedule id -> next fire time, UTC epoch ms
                                               (absent while paused): what reconcilers scan
    <prefix>:{<queue>}:sched_buffered  zset    schedule id -> the fire buffer_one holds
    <prefix>:{<queue>}:children:<id>   zset    a parent's children: child id -> created_at ms
                                               (in the PARENT's slot; a child's id names its
                                               own queue)
    <prefix>:{<queue>}:family:<id>     hash    a parent's spawn steps ("spawn:<n>" -> child
                                               id), its children's outcomes ("out:<child>"
                                               -> json), detached children ("detach:<child>")
    <prefix>:{<queue>}:joining:<id>    set     children a parked join still waits for
    <prefix>:{<queue>}:joins           zset    parent id -> ms its join parked or was last
                                               checked for a child whose record vanished
    <prefix>:{<queue>}:outbox          zset    "<kind> <run id>" -> ms: a run's end that must
                                               reach another slot (its parent: "ended", its
                                               children: "cascade"), until delivered
    <prefix>:{<queue>}:unborn:<id>     string  a child its parent's end cancelled before the
                                               child existed: create_run refuses it
    <prefix>:{<queue>}:create_template hash    a create_runs call's record template (every
                                               field a shape's runs share), deleted before
                                               the call returns: never seen outside it

Pub/sub channels of a queue (broadcast; not keys)::

    <prefix>:{<queue>}:wake            "ready": runnable work appeared (create, retry, release)
    <prefix>:{<queue>}:cancel          "<run id> <fence>": a client asked to cancel a held run

Cross-queue keys (plain commands, and one script that touches nothing else)::

    <prefix>:queues                    set     every declared queue: LEASEHOLD_QUEUES of
                                               each API and worker, and PUT /queues/{name}
                                               (declare_queue); never grown by a run
    <prefix>:workers                   zset    worker id -> last heartbeat ms
    <prefix>:worker:<id>               string  the worker's advertisement (JSON, with TTL)
    <prefix>:worker:<id>:drain         string  "drain": POST /workers/{id}/drain asked it to
                                               drain (read by its heartbeat; with TTL)
    <prefix>:operation:<id>            hash    a bulk retry's filter and progress (with TTL)
    <prefix>:operation:<id>:lease      string  the API process driving it (with TTL)
    <prefix>:ratelimits                hash    declared rate-limit key or template -> spec JSON
                                               (declare_rate_limit; PUT /rate-limits/{key})
    <prefix>:rl:{<bucket>}             string  a handler bucket's GCRA TAT (ms), under a hash
                                               tag of its own: shared by every queue
    <prefix>:schedules                 hash    schedule id -> its queue: the directory that
                                               finds a schedule by id and bounds how many exist
    <prefix>:{apikeys}:key:<id>        hash    a stored API key: name, role, created/expiry ms,
                                               digest (hex sha256 of its secret), previous
                                               digest and its deadline (with the key's TTL)
    <prefix>:{apikeys}:digest:<hex>    hash    a secret's digest -> id, name, role: what a
                                               request's key is looked up by; its TTL is the
                                               key's expiry (or a rotation's grace)
    <prefix>:{apikeys}:index           zset    key id -> expiry ms (+inf: never), for listing
                                               and bounding how many exist
    <prefix>:audit                     stream  operate/admin calls (who, role, method, path,
                                               status, client), capped and trimmed by age

    <prefix>:namespaces                hash    namespace name -> its record (quotas, created
                                               ms): every namespace but ``default``

A run id embeds its queue (``<queue>.<ULID>``), so ``GET /runs/{id}`` finds the
record without a directory lookup or a cross-slot read.

Namespaces (tenants) are key spaces: every key above but the API keys, the audit
stream, the signing keys and the namespace directory is named under the namespace's
prefix (:func:`app.namespaces.namespace_prefix`): ``<prefix>`` itself for ``default`` (so a
single-tenant deployment's keys are what they always were) and ``<prefix>:ns:<name>``
for any other. Queues, runs, events, schedules, limits, rate limits, operations and
workers of two namespaces never share a key, so a store built on one namespace's
prefix cannot read or write another's: isolation holds by construction, not by a
check each route must remember. Per-namespace quota buckets::

    <ns prefix>:quota:{<ns prefix>}:<name>   string  a rate quota's GCRA TAT (creates, signals)
"""

from __future__ import annotations

from dataclasses import dataclass

from app.errors import RunNotFound
from app.models import RUN_ID


def queue_of(run_id: str) -> str | None:
    """The queue a run id belongs to, or None when the id is malformed."""
    if not RUN_ID.fullmatch(run_id):
        return None
    return run_id.rsplit(".", 1)[0]


def queue_of_run(run_id: str) -> str:
    """The queue a run id belongs to; raises :class:`RunNotFound` for a malformed id."""
    queue = queue_of(run_id)
    if queue is None:
        raise RunNotFound(run_id)
    return queue


@dataclass(frozen=True)
class QueueKeys:
    """Key names for one queue, all under one hash tag."""

    prefix: str
    queue: str

    @property
    def tag(self) -> str:
        """The shared part of every key of this queue, hash tag included."""
        return f"{self.prefix}:{{{self.queue}}}"

    @property
    def run_prefix(self) -> str:
        """Run-key prefix handed to batch scripts, which derive run keys from popped ids."""
        return f"{self.tag}:run:"

    @property
    def events_prefix(self) -> str:
        """Event-stream prefix handed to batch scripts, for the same reason."""
        return f"{self.tag}:events:"

    @property
    def effects_prefix(self) -> str:
        """Effects-hash prefix handed to batch scripts.

        Must equal ``run_prefix`` with its last segment ``run:`` replaced by
        ``effects:``: ``finalize`` in finalize.lua derives a run's effects key that way so
        every script that ends a run expires its effects with it.
        """
        return f"{self.tag}:effects:"

    @property
    def handoff_idle(self) -> str:
        """Zset of workers registered for a hand-off (owner -> expiry ms): claim.lua's
        ``HANDOFF_IDLE``; claim_runs and the create scripts derive it from the tag."""
        return f"{self.tag}:handoff:idle"

    @property
    def handoff_args(self) -> str:
        """Hash owner -> what a claim on its behalf needs (claim.lua's ``HANDOFF_ARGS``)."""
        return f"{self.tag}:handoff:args"

    def handoff_inbox(self, owner_id: str) -> str:
        """List of the claim rows handed to one worker (keys.lua's ``handoff_inbox_of``)."""
        return f"{self.tag}:handoff:inbox:{owner_id}"

    def handoff_taken(self, owner_id: str) -> str:
        """List of the rows a worker moved out of its inbox and has not yet started: read
        again after its blocking connection was cut, so no taken row is lost."""
        return f"{self.tag}:handoff:taken:{owner_id}"

    @property
    def claim_receipt_prefix(self) -> str:
        """Claim-receipt prefix: ``claim_runs`` remembers what a token claimed, for retries."""
        return f"{self.tag}:claim:"

    @property
    def idem_prefix(self) -> str:
        """Idempotency-key prefix handed to scripts that expire a run's key with it."""
        return f"{self.tag}:idem:"

    @property
    def ready(self) -> str:
        """The ring of lanes that have queued runs and are not blocked (FIFO)."""
        return f"{self.tag}:ready"

    def build_ready(self, build_id: str) -> str:
        """A build's ring: the lanes of runs pinned to it (``@<build>/<lane>``).

        Only that build's workers serve it (claim_runs), so a claim never looks at runs
        pinned to another build.
        """
        return f"{self.tag}:ready@{build_id}"

    def pins(self, build_id: str) -> str:
        """Set of the queue's open runs pinned to ``build_id`` (finalize removes them)."""
        return f"{self.tag}:pins:{build_id}"

    @property
    def pinned_builds(self) -> str:
        """Set of the builds that have open pinned runs in this queue."""
        return f"{self.tag}:pinned_builds"

    def lane(self, lane: str) -> str:
        """Queued ids of one lane (``<handler>|<key>`` or ``!<singleton key>``), by score.

        Scripts derive every flow-control key from the tag (``enqueue`` and the rest in
        lanes.lua): these names must stay ``<tag>:<name>``.
        """
        return f"{self.tag}:lane:{lane}"

    @property
    def placed(self) -> str:
        """Hash: lane -> where it is ('' in the ring, else the resource it waits on)."""
        return f"{self.tag}:placed"

    def wait(self, resource: str) -> str:
        """Set of lanes blocked on ``resource`` (``h:<handler>``, ``k:<key>``, ``s:<key>``)."""
        return f"{self.tag}:wait:{resource}"

    @property
    def blocked(self) -> str:
        """Set of the resources that have blocked lanes."""
        return f"{self.tag}:blocked"

    @property
    def limits(self) -> str:
        """Hash of the queue's declared concurrency limits (``q``, ``h:*``, ``k:*``)."""
        return f"{self.tag}:limits"

    @property
    def slots(self) -> str:
        """Hash of slots held: running count per handler and key, holder per singleton."""
        return f"{self.tag}:slots"

    @property
    def queued(self) -> str:
        """Counter of the runs sitting in lanes (the queue's ready depth)."""
        return f"{self.tag}:queued"

    @property
    def kqueued(self) -> str:
        """Zset of concurrency key -> how many of its runs are queued (top-N for GET /queues)."""
        return f"{self.tag}:kqueued"

    def one(self, singleton_key: str) -> str:
        """A singleton key's queued count and newest queued run."""
        return f"{self.tag}:one:{singleton_key}"

    @property
    def delayed(self) -> str:
        """Zset of ids waiting for their retry time."""
        return f"{self.tag}:delayed"

    @property
    def leases(self) -> str:
        """Zset of held leases by expiry: what the reconciler scans."""
        return f"{self.tag}:leases"

    @property
    def wake_channel(self) -> str:
        """Channel on which scripts announce runnable work to idle workers."""
        return f"{self.tag}:wake"

    @property
    def cancel_channel(self) -> str:
        """Channel on which cancel_run pushes a cancel request to the run's owner."""
        return f"{self.tag}:cancel"

    @property
    def runs(self) -> str:
        """Zset of every run id on the queue by creation time."""
        return f"{self.tag}:runs"

    @property
    def unclaimed(self) -> str:
        """Zset of never-claimed runs by the time they expire (``queued_ttl_s``).

        A run's first claim and every terminal write remove its entry (``claim_runs``
        and ``finalize`` in finalize.lua derive this key from ``run_prefix``: it must stay
        ``<tag>:unclaimed`` beside ``<tag>:run:``); ``expire_queued`` ends the rest.
        """
        return f"{self.tag}:unclaimed"

    @property
    def parked(self) -> str:
        """Zset of the queue's parked runs by parked time, so counting them costs O(1).

        Scripts derive it from the run prefix (``parked_of`` in keys.lua): it must stay
        ``<tag>:parked`` beside ``<tag>:run:<id>``.
        """
        return f"{self.tag}:parked"

    @property
    def waiting(self) -> str:
        """Zset of the queue's runs parked on a durable wait, by the ms it ends by (+inf: none).

        A sleep, a signal or a join (``park_waiting``); its wait's end (a signal, its children,
        its time: ``requeue_waiting``, ``promote_due``) or the run's end (``finalize``) takes
        it out. A timed wait is in ``delayed`` too, by the same score, so GET /queues counts
        retry backoff apart in O(log n). Scripts derive it from the run prefix
        (``waiting_of`` in keys.lua): it must stay ``<tag>:waiting`` beside ``<tag>:run:<id>``.
        """
        return f"{self.tag}:waiting"

    @property
    def activity(self) -> str:
        """Capped stream of every run's lifecycle events, for live views of the queue.

        Scripts derive it from an events key (``emit`` in events.lua): it must stay
        ``<tag>:activity`` beside ``<tag>:events:<id>``.
        """
        return f"{self.tag}:activity"

    @property
    def create_template(self) -> str:
        """A ``create_runs`` call's record template, copied into each new run's record.

        Lives only inside one script call (create.lua ``place_template``, derived from the
        ready key by ``create_template_of``): it must stay ``<tag>:create_template``.
        """
        return f"{self.tag}:create_template"

    def series(self, minute: int) -> str:
        """The queue's outcome counters of one epoch minute (``now_ms // 60000``).

        ``count_outcome`` in finalize.lua derives it from ``run_prefix``: it must stay
        ``<tag>:series:<minute>`` beside ``<tag>:run:<id>``.
        """
        return f"{self.tag}:series:{minute}"

    def start_bucket(self, bucket: str) -> str:
        """A start bucket of the queue: the GCRA TAT gating starts of runs naming ``bucket``.

        ``rate_gate`` in gcra.lua derives it from ``run_prefix`` (``start_bucket_of``): it
        must stay ``<tag>:rl:<bucket>`` beside ``<tag>:run:<id>``.
        """
        return f"{self.tag}:rl:{bucket}"

    def schedule(self, schedule_id: str) -> str:
        """A schedule's record (its runs go to this queue, so it shares the hash tag)."""
        return f"{self.tag}:sched:{schedule_id}"

    @property
    def schedule_due(self) -> str:
        """Zset of this queue's schedules by next fire time: what every reconciler scans."""
        return f"{self.tag}:sched_due"

    @property
    def schedule_buffered(self) -> str:
        """Zset of this queue's schedules holding a buffer_one fire, by its fire time."""
        return f"{self.tag}:sched_buffered"

    def children(self, parent_id: str) -> str:
        """A parent's children index (zset child id -> created_at ms), in the parent's slot.

        ``finalize`` in finalize.lua derives it from ``run_prefix`` (``children_key_of``): it
        must stay ``<tag>:children:<id>`` beside ``<tag>:run:<id>``.
        """
        return f"{self.tag}:children:{parent_id}"

    def family(self, parent_id: str) -> str:
        """A parent's spawn steps, its children's delivered outcomes and detach flags.

        Derived in keys.lua as ``<tag>:family:<id>`` (``family_key_of``), like the index.
        """
        return f"{self.tag}:family:{parent_id}"

    @property
    def joins(self) -> str:
        """The queue's parked joins (zset parent id -> ms parked or last checked): what
        ``Outbox.check_joins`` walks to find a child deleted before it ended."""
        return f"{self.tag}:joins"

    def joining(self, parent_id: str) -> str:
        """The children a parked ``ctx.join`` still waits for (``joining_key_of``)."""
        return f"{self.tag}:joining:{parent_id}"

    @property
    def outbox(self) -> str:
        """Zset of ends that must reach another slot: ``ended <id>``, ``cascade <id>`` -> ms.

        ``finalize`` in finalize.lua adds to it (``outbox_of``): it must stay ``<tag>:outbox``.
        """
        return f"{self.tag}:outbox"

    def unborn(self, run_id: str) -> str:
        """A child cancelled by its parent's end before it was created (create refuses it)."""
        return f"{self.tag}:unborn:{run_id}"

    def run(self, run_id: str) -> str:
        """The run record."""
        return f"{self.run_prefix}{run_id}"

    def events(self, run_id: str) -> str:
        """The run's event stream."""
        return f"{self.events_prefix}{run_id}"

    def effects(self, run_id: str) -> str:
        """The run's memoized effects (hash: ``<name>:<ordinal>`` -> record JSON)."""
        return f"{self.effects_prefix}{run_id}"

    def waits(self, run_id: str) -> str:
        """The run's waits: sleeps, signals and questions by step, and its signal inbox.

        ``waits_key_of`` in keys.lua derives it from ``run_prefix``: it must stay
        ``<tag>:waits:<id>`` beside ``<tag>:run:<id>``.
        """
        return f"{self.tag}:waits:{run_id}"

    def idem(self, idempotency_key: str) -> str:
        """Where an idempotency key remembers its run."""
        return f"{self.idem_prefix}{idempotency_key}"


@dataclass(frozen=True)
class GlobalKeys:
    """Keys that span queues; never passed to a script."""

    prefix: str

    @property
    def queues(self) -> str:
        """Set of every declared queue name (see app/store/queues/store.py)."""
        return f"{self.prefix}:queues"

    @property
    def workers(self) -> str:
        """Zset of worker ids by last heartbeat."""
        return f"{self.prefix}:workers"

    @property
    def schedules(self) -> str:
        """Hash of every schedule id -> its queue (see app/store/schedules/store.py)."""
        return f"{self.prefix}:schedules"

    @property
    def test_clock(self) -> str:
        """String: the test kit's virtual clock offset in ms (app/testing/clock.py). Read
        only by the scripts the kit loads, which add it to TIME; no deployment's do."""
        return f"{self.prefix}:testing:clock_offset_ms"

    def worker(self, worker_id: str) -> str:
        """One worker's advertisement."""
        return f"{self.prefix}:worker:{worker_id}"

    def operation(self, operation_id: str) -> str:
        """A bulk operation's record: its filter, progress counters and cursor."""
        return f"{self.prefix}:operation:{operation_id}"

    def operation_lease(self, operation_id: str) -> str:
        """Who drives a bulk operation now; it expires when that process stops renewing."""
        return f"{self.prefix}:operation:{operation_id}:lease"

    @property
    def rate_limits(self) -> str:
        """Hash of declared rate-limit keys and templates -> spec JSON (store/ratelimits.py)."""
        return f"{self.prefix}:ratelimits"

    def bucket(self, bucket: str) -> str:
        """A handler bucket (``ctx.rate_limit``): its own hash tag, shared by every queue."""
        return f"{self.prefix}:rl:{{{bucket}}}"

    def worker_drain(self, worker_id: str) -> str:
        """The flag that asks one worker to drain (its heartbeat reads it each beat)."""
        return f"{self.prefix}:worker:{worker_id}:drain"

    @property
    def api_key_index(self) -> str:
        """Zset of stored API key ids by expiry ms; one hash tag for every API key key,
        so a key's record, digests and index change in one MULTI even on a Cluster."""
        return f"{self.prefix}:{{apikeys}}:index"

    def api_key(self, key_id: str) -> str:
        """A stored API key's record (never its secret; the secret's digest)."""
        return f"{self.prefix}:{{apikeys}}:key:{key_id}"

    def api_key_digest(self, digest_hex: str) -> str:
        """The lookup of a presented secret by its SHA-256: id, name and role."""
        return f"{self.prefix}:{{apikeys}}:digest:{digest_hex}"

    @property
    def audit(self) -> str:
        """Capped stream of operate/admin calls (app/store/audit/)."""
        return f"{self.prefix}:audit"

    @property
    def namespaces(self) -> str:
        """Hash of declared namespaces: name -> record JSON (app/store/namespaces/)."""
        return f"{self.prefix}:namespaces"

    def quota_bucket(self, name: str) -> str:
        """A namespace's rate quota (``creates``, ``signals``): a GCRA TAT under a hash
        tag of its own, so every API process shares it whatever the queue."""
        return f"{self.prefix}:quota:{{{self.prefix}}}:{name}"

    @property
    def signing_keys(self) -> str:
        """Hash of token signing keys: kid -> JSON record (app/store/signing/store.py)."""
        return f"{self.prefix}:signing:keys"
