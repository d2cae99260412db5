"""Rereads: the sync waits' once-a-second re-reads (the backstop for a lost NOTIFY), gathered into one statement.

Every sync wait re-reads its job once a second without a notification (waits.py). Behind a deep queue (a REST batch
of 16 from each of 32 callers: 512 waits) that was one statement a wait a second, as many as the jobs finishing,
and each that found its job queued asked for placement: on a loaded machine the waits grew longer, so the re-reads
more, so the jobs slower. A re-read that its second brings instead joins the ones asked for within
`gather_seconds` and one read answers them all (repository/jobs.sql `get_jobs`, by id, no result); placement is
asked for once if any was still queued. The wait then reads its job alone, with its result, only when the view
says it is done (or gone), as it would have (bench/peers.py, the REST batch path). A notification's wake-up still
reads at once: only the timer's re-reads wait for company, at most `gather_seconds` past their second.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

from thermostat.policy.pool.jobs import JobState

from ..repository import JobView
from .local import WantsPlacement

GATHER_SECONDS = 0.05
"""How long a timer's re-read waits for others to share its statement (its wait's backstop is 1 s)."""

ReadMany = Callable[[Sequence[str]], Awaitable[dict[str, JobView]]]


class Rereads:
    def __init__(
        self, read_many: ReadMany, wants_placement: WantsPlacement, *, gather_seconds: float = GATHER_SECONDS
    ) -> None:
        self.read_many = read_many
        self.wants_placement = wants_placement
        self.gather_seconds = gather_seconds
        self.asked: dict[str, list[asyncio.Future[JobView | None]]] = {}
        self.gathering: asyncio.TimerHandle | None = None
        self.reading: set[asyncio.Task[None]] = set()

    def read(self, job_id: str) -> asyncio.Future[JobView | None]:
        """The job's view (None: not in the store) from the next gathered read; its error if the read fails."""
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[JobView | None] = loop.create_future()
        self.asked.setdefault(job_id, []).append(answer)
        if self.gathering is None:
            self.gathering = loop.call_later(self.gather_seconds, self._send)
        return answer

    def _send(self) -> None:
        self.gathering = None
        asked, self.asked = self.asked, {}
        # a wait gone meanwhile (its caller's deadline, a wake-up) has cancelled its answer: nothing to read for it
        wanted = {job_id: answers for job_id, answers in asked.items() if not all(a.done() for a in answers)}
        if not wanted:
            return
        task = asyncio.get_running_loop().create_task(self._read(wanted), name="pool-wait-rereads")
        self.reading.add(task)
        task.add_done_callback(self.reading.discard)

    async def _read(self, asked: dict[str, list[asyncio.Future[JobView | None]]]) -> None:
        try:
            views = await self.read_many(list(asked))
        except BaseException as error:  # each wait gets the error its own read would have raised
            for answers in asked.values():
                for answer in answers:
                    if not answer.done():
                        answer.cancel() if isinstance(error, asyncio.CancelledError) else answer.set_exception(error)
            if not isinstance(error, Exception):
                raise
            return
        queued = False
        for job_id, answers in asked.items():
            view = views.get(job_id)
            queued = queued or (view is not None and view.state == JobState.QUEUED)
            for answer in answers:
                if not answer.done():
                    answer.set_result(view)
        if queued:  # the backstop for a completion that raced a submit, as each wait's own read asked
            self.wants_placement()
