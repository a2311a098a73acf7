"""In-process wake-ups for event subscribers, and the fan-out of a job's events to its followers.

Events live in the registry; the bus only tells subscribers in the same process that a job has
new ones. :class:`Fanout` is what followers (websockets, the CLI, the magic) read through:

- one *feed* per followed job reads each new batch from the registry once and offers it to
  every follower of that job: push, not one poll per follower;
- one *poller* per process, running only while some job is followed, reads every followed job's
  newest ``seq`` in one query every :data:`POLL_S` and wakes the feeds of jobs another process
  (the CLI, a kernel, a detached watcher) wrote to; writes from this process wake feeds at once
  through the bus;
- each follower has a bounded queue (:data:`FOLLOWER_BUFFER`). A follower whose queue is full,
  or who is still replaying (``after`` below what the feed has seen), reads the registry by
  ``seq`` itself until it has caught up with the feed: a slow reader costs registry reads, never
  unbounded memory, and every follower gets every event once, in ``seq`` order.

Memory held for followers is at most ``followed jobs * FOLLOWER_BUFFER`` events (a feed's events
are shared by its followers) plus one pointer per queued event per follower.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections import Counter, defaultdict, deque
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from j2c_server.core.errors import NotFound
from j2c_server.registry.job_registry import Registry
from j2c_server.wire.event_frames import WireEvent

POLL_S = 0.05  # other processes' events reach a follower within this (plus one read)
FOLLOWER_BUFFER = 256  # events queued per follower; beyond, it catches up from the registry
STREAM_BATCH = 500  # events per registry read


Sink = Callable[[Sequence[WireEvent]], None]


class EventBus:
    def __init__(self) -> None:
        self._waiters: defaultdict[str, set[asyncio.Event]] = defaultdict(set)
        self._sinks: defaultdict[str, set[Sink]] = defaultdict(set)
        self._writing: Counter[str] = Counter()

    @contextmanager
    def writing(self, job_id: str) -> Iterator[None]:
        """Around a write of ``job_id``'s events that publishes them when committed: until
        then the poller leaves that job's new seqs to the hand-over (see :meth:`Fanout._poll`)."""
        self._writing[job_id] += 1
        try:
            yield
        finally:
            self._writing[job_id] -= 1
            if not self._writing[job_id]:
                del self._writing[job_id]

    def is_writing(self, job_id: str) -> bool:
        return job_id in self._writing

    def publish(self, job_id: str, events: Sequence[WireEvent] = ()) -> None:
        """Wake ``job_id``'s subscribers; ``events``, when given, are the ones just committed,
        handed to sinks so that they need not read them back from the registry."""
        if events:
            for sink in self._sinks.get(job_id, ()):
                sink(events)
        for waiter in self._waiters.get(job_id, ()):
            waiter.set()

    @contextmanager
    def subscribe(self, job_id: str, sink: Sink | None = None) -> Iterator[asyncio.Event]:
        """An event that is set whenever ``job_id`` gets new events; clear it before reading.
        ``sink`` is given the events published with their wake-up (this process's writes)."""
        waiter = asyncio.Event()
        self._waiters[job_id].add(waiter)
        if sink is not None:
            self._sinks[job_id].add(sink)
        try:
            yield waiter
        finally:
            self._waiters[job_id].discard(waiter)
            if not self._waiters[job_id]:
                del self._waiters[job_id]
            if sink is not None:
                self._sinks[job_id].discard(sink)
                if not self._sinks[job_id]:
                    del self._sinks[job_id]


class FanoutClosed(Exception):
    """The fan-out stopped (its service is shutting down) while a follower read from it."""


class _Follower:
    __slots__ = ("behind", "error", "last", "queue", "terminal_queued", "wake")

    def __init__(self, after: int) -> None:
        self.last = after  # the highest seq queued for (or delivered to) this follower
        self.queue: deque[WireEvent] = deque()
        # Behind: reads the registry itself; the feed only wakes it. Every follower starts so
        # (its replay), and goes back to it when its queue is full.
        self.behind = True
        self.wake = asyncio.Event()
        self.error: BaseException | None = None
        self.terminal_queued = False  # a batch with the terminal status event was offered


class _Feed:
    __slots__ = ("ended", "followers", "inbox", "job_id", "last", "task")

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        self.followers: set[_Follower] = set()
        self.last: int | None = None  # the newest seq offered to followers; None until known
        self.task: asyncio.Task[None] | None = None
        # Events this process committed, handed over by the bus: offered without a read.
        self.inbox: list[WireEvent] = []
        self.ended = False  # the terminal event was offered

    def hand_over(self, events: Sequence[WireEvent]) -> None:
        self.inbox.extend(events)

    def take_inbox(self) -> list[WireEvent] | None:
        """The handed-over events that follow ``last`` without a gap (none when all were
        offered already, read from the registry meanwhile), or None when the registry must be
        read (nothing handed over, or a gap: another writer's events)."""
        inbox, self.inbox = self.inbox, []
        if self.last is None or not inbox:
            return None
        inbox.sort(key=lambda event: event.seq)
        taken: list[WireEvent] = []
        expected = self.last + 1
        for event in inbox:
            if event.seq < expected:
                continue  # already offered (read from the registry meanwhile)
            if event.seq != expected:
                return None
            taken.append(event)
            expected += 1
        return taken


Spawn = Callable[[Coroutine[Any, Any, None], str], "asyncio.Task[None]"]


class Fanout:
    """Followers of jobs in this process, fed from the registry; see the module docstring.

    ``spawn`` runs a background task (the service's, so that stopping it ends them);
    ``on_idle(job_id)`` is awaited when a followed, unfinished job has had no event for
    ``idle_s`` (the service takes over a job nobody drives)."""

    def __init__(
        self,
        registry: Registry,
        bus: EventBus,
        *,
        spawn: Spawn,
        on_idle: Callable[[str], Awaitable[None]],
        idle_s: float,
    ) -> None:
        self.registry = registry
        self.bus = bus
        self._spawn = spawn
        self._on_idle = on_idle
        self._idle_s = idle_s
        self._feeds: dict[str, _Feed] = {}
        self._poller: asyncio.Task[None] | None = None
        self._closed = False

    def close(self) -> None:
        """End every follower with :class:`FanoutClosed` (at its next step)."""
        self._closed = True
        for feed in self._feeds.values():
            for follower in feed.followers:
                follower.wake.set()

    @property
    def followers(self) -> int:
        return sum(len(feed.followers) for feed in self._feeds.values())

    async def follow(self, job_id: str, after: int = 0) -> AsyncIterator[WireEvent]:
        """The job's events after ``after``, then live ones; ends after the terminal status."""
        async for batch in self.follow_batches(job_id, after):
            for event in batch:
                yield event

    async def follow_batches(self, job_id: str, after: int = 0) -> AsyncIterator[list[WireEvent]]:
        """:meth:`follow` in batches: whatever is queued (or read) when the follower looks, so
        a job printing a hundred lines a second costs its viewers a few steps, not one each;
        a batch never goes past the terminal status event, and the last batch holds it."""
        if self._closed:
            raise FanoutClosed
        feed = self._feeds.get(job_id)
        if feed is None:
            feed = self._open(job_id)
        me = _Follower(after)
        feed.followers.add(me)
        try:
            while True:
                # Cleared before looking: whatever changes while this step awaits sets it again.
                me.wake.clear()
                if self._closed:
                    raise FanoutClosed
                if me.error is not None:
                    raise me.error
                if me.queue:
                    batch = list(me.queue)
                    me.queue.clear()
                    if me.terminal_queued and _up_to_terminal(batch):
                        yield batch
                        return
                    yield batch
                    continue
                if me.behind:
                    # The queue is empty and the feed leaves a follower that is behind alone:
                    # me.last is exactly what was delivered.
                    events, status = await self.registry.events.read_wire(
                        job_id, me.last, STREAM_BATCH
                    )
                    if events:
                        ended = _up_to_terminal(events)
                        me.last = events[-1].seq
                        yield events
                        if ended:
                            return
                    elif status.terminal:
                        return
                    # Caught up when this read reached what the feed has offered: the feed's
                    # next batch starts right after it (older seqs in it are skipped).
                    if (
                        len(events) < STREAM_BATCH
                        and feed.last is not None
                        and feed.last <= me.last
                    ):
                        me.behind = False
                    if events:
                        continue
                await me.wake.wait()
        finally:
            feed.followers.discard(me)
            if not feed.followers and self._feeds.get(job_id) is feed:
                del self._feeds[job_id]
                if feed.task is not None:
                    feed.task.cancel()

    # ------------------------------------------------------------------ feeds and the poller

    def _open(self, job_id: str) -> _Feed:
        feed = _Feed(job_id)
        self._feeds[job_id] = feed
        feed.task = self._spawn(self._run_feed(feed), f"j2c-feed-{job_id}")
        feed.task.add_done_callback(lambda task: self._feed_ended(feed, task))
        if self._poller is None or self._poller.done():
            self._poller = self._spawn(self._poll(), "j2c-followers-poll")
        return feed

    def _feed_ended(self, feed: _Feed, task: asyncio.Task[None]) -> None:
        """A feed that stops while followed (an error, the service stopping) ends its followers;
        a removed job ends them with the registry's NotFound."""
        if self._feeds.get(feed.job_id) is feed:
            del self._feeds[feed.job_id]
        error = (None if task.cancelled() else task.exception()) or FanoutClosed()
        for follower in feed.followers:
            follower.error = error
            follower.wake.set()

    async def _run_feed(self, feed: _Feed) -> None:
        job_id = feed.job_id
        with self.bus.subscribe(job_id, feed.hand_over) as wake:
            feed.last = (await self.registry.events.last_seqs([job_id])).get(job_id)
            if feed.last is None:
                raise NotFound(f"no job {job_id!r}", field="job_id")
            self._wake_all(feed)  # followers that replayed past it may stop reading now
            idle_since = time.monotonic()
            while True:
                wake.clear()
                handed = feed.take_inbox()
                if handed is not None:
                    # This process's own writes, following what was offered: no read. Any
                    # other writer's later events are the poller's to notice.
                    if handed:
                        self._offer_all(feed, handed)
                        idle_since = time.monotonic()
                    terminal = feed.ended
                else:
                    events, status = await self.registry.events.read_wire(
                        job_id, feed.last, STREAM_BATCH
                    )
                    if events:
                        self._offer_all(feed, events)
                        idle_since = time.monotonic()
                        continue
                    terminal = status.terminal
                if terminal:
                    await wake.wait()  # nothing follows; only a removal (seen by the poller)
                    continue
                # The idle deadline sets the same wake-up: no asyncio.wait_for, which on Python
                # 3.11 can swallow a cancel that lands as the wait ends (the service's stop
                # then waited for this feed forever).
                deadline = idle_since + self._idle_s
                timer = asyncio.get_running_loop().call_later(
                    max(deadline - time.monotonic(), 0.0), wake.set
                )
                try:
                    await wake.wait()
                finally:
                    timer.cancel()
                if time.monotonic() >= deadline:
                    idle_since = time.monotonic()
                    await self._on_idle(job_id)

    @staticmethod
    def _offer_all(feed: _Feed, events: list[WireEvent]) -> None:
        feed.last = events[-1].seq
        feed.ended = events[-1].terminal
        terminal = any(event.terminal for event in events)  # once, not once per follower
        for follower in list(feed.followers):
            follower.terminal_queued |= terminal
            _offer(follower, events)

    @staticmethod
    def _wake_all(feed: _Feed) -> None:
        for follower in feed.followers:
            follower.wake.set()

    async def _poll(self) -> None:
        """Wake the feeds of jobs whose newest seq in the registry is past what they offered:
        events another process wrote (this process's own writes wake them through the bus).

        A seq this process has just committed is in the registry a few loop steps before its
        writer hands it over; waking the feed then would read back what is on its way (with a
        hundred jobs printing, most of the registry's reads). So a job with a write of this
        process in flight is left to that hand-over for one round; if the feed has not moved
        by the next, it is woken anyway (a hand-over that does not come: the writer stuck after
        its commit; one cancelled stops counting as writing at once)."""
        held: dict[str, int] = {}  # job -> the feed's last seq when its wake was held back
        while self._feeds:
            await asyncio.sleep(POLL_S)
            followed = [job_id for job_id, feed in self._feeds.items() if feed.last is not None]
            try:
                newest = await self.registry.events.last_seqs(followed)
            except sqlite3.Error:  # e.g. the file locked past busy_timeout: next round retries
                continue
            holding: dict[str, int] = {}
            for job_id in followed:
                feed = self._feeds.get(job_id)
                if feed is None or feed.last is None:
                    continue  # unfollowed meanwhile
                last, seq = feed.last, newest.get(job_id)
                if seq is not None and seq <= last:
                    continue
                if seq is not None and self.bus.is_writing(job_id) and held.get(job_id) != last:
                    holding[job_id] = last
                    continue
                self.bus.publish(job_id)  # None: removed; the feed's read says NotFound
            held = holding


def _up_to_terminal(batch: list[WireEvent]) -> bool:
    """Cut ``batch`` after its terminal status event, if it has one (then True)."""
    for index, event in enumerate(batch):
        if event.terminal:
            del batch[index + 1 :]
            return True
    return False


def _offer(follower: _Follower, events: list[WireEvent]) -> None:
    """Queue the events the follower lacks, in order; a gap or a full queue sends it back to
    reading the registry from its last seq."""
    if not follower.behind:
        first, count = events[0].seq, len(events)
        if (
            first == follower.last + 1
            and events[-1].seq == first + count - 1  # consecutive (a feed's batch always is)
            and len(follower.queue) + count <= FOLLOWER_BUFFER
        ):
            follower.queue.extend(events)
            follower.last = events[-1].seq
            follower.wake.set()
            return
        for event in events:
            if event.seq <= follower.last:
                continue
            if event.seq != follower.last + 1 or len(follower.queue) >= FOLLOWER_BUFFER:
                follower.behind = True
                break
            follower.queue.append(event)
            follower.last = event.seq
    follower.wake.set()
