"""The fair limiter of the grader's slots (issue 31.1): the order slots are handed out in, and
that a cancelled waiter or holder leaves nothing behind."""

from __future__ import annotations

import asyncio

import pytest

from bonusjudge_client.wire.grading import GradeRequest, GradeResult
from judge.calls import TENANT
from judge.config import JudgeConfig
from judge.engine import Grader
from judge.fairness import FairLimiter
from judge.providers.fake import FakeProvider


async def settle() -> None:
    """Let every task that can run, run."""
    for _ in range(5):
        await asyncio.sleep(0)


class Recorder:
    """Tasks that take a slot, note who got it, and hold it until let go."""

    def __init__(self, limiter: FairLimiter) -> None:
        self.limiter = limiter
        self.order: list[str] = []
        self.gates: dict[str, asyncio.Event] = {}
        self.tasks: dict[str, asyncio.Task[None]] = {}

    def start(self, owner: str, name: str) -> None:
        self.gates[name] = asyncio.Event()

        async def run() -> None:
            async with self.limiter.slot(owner):
                self.order.append(name)
                await self.gates[name].wait()

        self.tasks[name] = asyncio.create_task(run())

    async def finish(self, name: str) -> None:
        self.gates[name].set()
        await asyncio.wait_for(self.tasks[name], 1)
        await settle()

    async def drain(self) -> None:
        """Let go of each holder in the order they got their slots, until none is left."""
        done = 0
        while done < len(self.order):
            await self.finish(self.order[done])
            done += 1


async def test_a_waiting_owner_with_fewer_in_flight_gets_the_next_slot() -> None:
    rec = Recorder(FairLimiter(2))
    for n in range(6):
        rec.start("A", f"a{n}")  # A floods: a0, a1 run, a2..a5 wait in order
    await settle()
    rec.start("B", "b0")
    await settle()
    assert rec.order == ["a0", "a1"]
    await rec.finish("a0")
    assert rec.order[-1] == "b0"  # not a2, which came first
    rec.start("B", "b1")
    await settle()
    await rec.finish("a1")
    # A holds none, B one: A's turn (FIFO within A), then B's next only when it holds fewer.
    assert rec.order[-1] == "a2"
    await rec.finish("b0")
    assert rec.order[-1] == "b1"
    await rec.finish("a2")
    assert rec.order[-1] == "a3"
    for name in ("b1", "a3", "a4", "a5"):
        await rec.finish(name)
    assert rec.order == ["a0", "a1", "b0", "a2", "b1", "a3", "a4", "a5"]
    assert rec.limiter.busy == 0 and rec.limiter.owners() == 0


async def test_equal_owners_take_turns() -> None:
    rec = Recorder(FairLimiter(1))
    rec.start("A", "first")
    await settle()
    for n in range(3):
        rec.start("A", f"a{n}")
        rec.start("B", f"b{n}")
        rec.start("C", f"c{n}")
    await settle()
    await rec.drain()
    # A was served last (first), so B and C go before A's next.
    assert rec.order == ["first", "b0", "c0", "a0", "b1", "c1", "a1", "b2", "c2", "a2"]


async def test_an_owner_alone_gets_every_slot() -> None:
    rec = Recorder(FairLimiter(3))
    for n in range(5):
        rec.start("A", f"a{n}")
    await settle()
    assert rec.order == ["a0", "a1", "a2"] and rec.limiter.held("A") == 3
    assert rec.limiter.waiting("A") == 2


async def test_a_cancelled_waiter_leaves_the_queue_and_a_cancelled_holder_frees_its_slot() -> None:
    limiter = FairLimiter(1)
    rec = Recorder(limiter)
    rec.start("A", "a0")
    rec.start("B", "b0")
    rec.start("C", "c0")
    await settle()
    rec.tasks["b0"].cancel()  # waiting
    await settle()
    assert limiter.waiting() == 1 and limiter.waiting("B") == 0
    rec.tasks["a0"].cancel()  # holding
    await settle()
    assert rec.order == ["a0", "c0"] and limiter.held("A") == 0
    await rec.finish("c0")
    assert limiter.busy == 0 and limiter.waiting() == 0 and limiter.owners() == 0


async def test_a_waiter_cancelled_as_its_slot_arrives_passes_the_slot_on() -> None:
    limiter = FairLimiter(1)
    await limiter.acquire("A")
    waiter = asyncio.create_task(limiter.acquire("B"))
    other = asyncio.create_task(limiter.acquire("C"))
    await settle()
    limiter.release("A")  # hands the slot to B's future...
    waiter.cancel()  # ...whose task is cancelled before it resumes
    await settle()
    assert waiter.cancelled()
    await asyncio.wait_for(other, 1)  # C got the slot B could not use
    assert limiter.held("C") == 1 and limiter.held("B") == 0
    limiter.release("C")
    assert limiter.busy == 0 and limiter.owners() == 0


async def test_many_owners_come_and_go_without_a_leak() -> None:
    limiter = FairLimiter(4)

    async def one(owner: str) -> None:
        async with limiter.slot(owner):
            await asyncio.sleep(0)

    tasks = [asyncio.create_task(one(f"k{n % 50}")) for n in range(2_000)]
    for task in tasks[::7]:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    assert limiter.busy == 0 and limiter.waiting() == 0 and limiter.owners() == 0


def test_capacity_must_be_positive() -> None:
    with pytest.raises(ValueError, match="capacity"):
        FairLimiter(0)


async def test_the_grader_serves_another_tenants_item_before_a_floods_backlog() -> None:
    """Through ``Grader.grade``: B's one item, sent after A's 40, is among the first graded."""
    finished: list[str] = []
    # No judge call (ROUGE-L only): each item's time is the 10 ms sleep below.
    grader = Grader(JudgeConfig(concurrency=2, metrics=("rouge_l",)), provider=FakeProvider([]))
    original = grader._grade

    async def graded(
        request: GradeRequest, config: JudgeConfig, item_id: str | None
    ) -> GradeResult:
        await asyncio.sleep(0.01)
        result = await original(request, config, item_id)
        finished.append(result.id)
        return result

    grader._grade = graded  # type: ignore[method-assign]

    async def as_tenant(tenant: str, ids: list[str]) -> None:
        TENANT.set(tenant)
        await asyncio.gather(*(grader.grade(item(i)) for i in ids))

    flood = asyncio.create_task(as_tenant("A", [f"a{n}" for n in range(40)]))
    await asyncio.sleep(0.015)
    await as_tenant("B", ["b"])
    assert finished.index("b") < 6, finished
    await flood
    await grader.aclose()


def item(item_id: str) -> GradeRequest:
    return GradeRequest(
        id=item_id, question="Q?", reference="The reference answer.",
        bonus_points=["a point"], response="An answer.",
    )


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def test_with_another_owner_about_the_last_slot_waits_for_a_newcomer() -> None:
    """B's request starts at once instead of waiting for one of A's calls to end."""
    clock = Clock()
    rec = Recorder(FairLimiter(4, recent=2.0, clock=clock))
    rec.start("B", "b0")
    await settle()
    await rec.finish("b0")  # B has been about; A floods
    for n in range(8):
        rec.start("A", f"a{n}")
    await settle()
    assert rec.limiter.held("A") == 3 and rec.limiter.busy == 3  # one slot kept free
    rec.start("B", "b1")
    await settle()
    assert rec.order[-1] == "b1" and rec.limiter.held("B") == 1  # at once: no A call ended
    # B quiet for longer than `recent`: A may fill every slot again.
    await rec.finish("b1")
    clock.now = 5.0
    await rec.finish("a0")
    assert rec.limiter.held("A") == 4


async def test_alone_an_owner_fills_every_slot_even_with_the_reserve_on() -> None:
    rec = Recorder(FairLimiter(4, recent=2.0, clock=Clock()))
    for n in range(6):
        rec.start("A", f"a{n}")
    await settle()
    assert rec.limiter.held("A") == 4
