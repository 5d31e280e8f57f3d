"""Stage 3 on its own: how many tasks run at once, and the model choice that
arrives while they run.

The experts here are held in process (our own :class:`Expert` protocol, no
client library involved): each call waits until the test releases it, so
"how many run at once" is read after the loop has settled, never timed.
The hosted backend end to end (the real client on the HF fake) is in
``test_agent_speculation.py``."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

from core.catalog import ModelInfo
from core.execution import Assignment, Executor, TaskOutcome
from core.planning import PlannedTask
from core.result_cache import ResultCache
from core.results import Blob, TaskInputs, TaskResult
from core.routing import ExpertRouter
from core.types import TaskState, TaskStatus


class Held:
    """An expert whose calls wait until released; counts how many run at once."""

    def __init__(self, name: str, *, failing: Sequence[str] = ()) -> None:
        self.name = name
        self.failing = set(failing)
        self.running = 0
        self.peak = 0
        self.calls: list[tuple[str, str, str | None]] = []
        self.release = asyncio.Event()

    def can_run(self, task: str, model: ModelInfo | None = None) -> bool:
        return True

    async def run(self, task: str, model: ModelInfo, inputs: TaskInputs) -> TaskResult:
        self.calls.append((task, model.id, inputs.text))
        self.running += 1
        self.peak = max(self.peak, self.running)
        try:
            await self.release.wait()
        finally:
            self.running -= 1
        if model.id in self.failing:
            raise RuntimeError("broken model")
        return TaskResult(text=f"{model.id}: {inputs.text}")

    async def aclose(self) -> None:
        pass


def M(model_id: str, task: str = "summarization") -> ModelInfo:
    return ModelInfo(model_id, task)


def wide(n: int) -> list[PlannedTask]:
    return [PlannedTask(i, "summarization", [], {"text": f"note {i}"}) for i in range(n)]


def models_for(plan: Sequence[PlannedTask], *ids: str) -> dict[int, list[ModelInfo]]:
    return {t.id: [M(i, t.task) for i in ids] for t in plan}


async def settle() -> None:
    """Let every task that can make progress make it (all work is in process)."""
    for _ in range(200):
        await asyncio.sleep(0)


async def no_file(handle: str) -> Blob:
    raise AssertionError(f"no file should be read ({handle})")


async def test_a_wide_plan_of_six_hosted_tasks_runs_all_six_at_once() -> None:
    remote = Held("remote")
    # The process-wide limit is for local inference: one slot must not hold back hosted calls.
    ex = Executor(ExpertRouter("remote", remote=remote, local=None), concurrency=1)
    plan = wide(6)
    run = asyncio.create_task(ex.run(plan, models_for(plan, "m/a"), load_handle=no_file))
    await settle()
    assert remote.running == 6
    remote.release.set()
    outcomes = await run
    assert [o.status for o in outcomes.values()] == [TaskStatus.DONE] * 6
    assert remote.peak == 6


async def test_one_requests_parallelism_is_bounded_per_request() -> None:
    remote = Held("remote")
    ex = Executor(ExpertRouter("remote", remote=remote, local=None), max_parallel=4)
    plan = wide(6)
    first = asyncio.create_task(ex.run(plan, models_for(plan, "m/a"), load_handle=no_file))
    second = asyncio.create_task(ex.run(plan, models_for(plan, "m/a"), load_handle=no_file))
    await settle()
    assert remote.running == 8  # 4 for each request: the bound is not shared between them
    remote.release.set()
    for run in (first, second):
        assert all(o.status is TaskStatus.DONE for o in (await run).values())
    assert remote.peak == 8


async def test_local_inference_respects_the_process_wide_limit() -> None:
    local = Held("local")
    ex = Executor(ExpertRouter("local", remote=None, local=local), concurrency=2)
    plan = wide(3)
    shown: dict[int, tuple[TaskState, ...]] = {}

    def listener(n: int) -> Callable[[tuple[TaskState, ...]], Awaitable[None]]:
        async def show(states: tuple[TaskState, ...]) -> None:
            shown[n] = states

        return show

    runs = [
        asyncio.create_task(
            ex.run(plan, models_for(plan, "m/a"), load_handle=no_file, listener=listener(n))
        )
        for n in range(2)
    ]
    await settle()
    assert local.running == 2  # two requests, six local tasks, two slots in the process
    # the ones waiting for a slot have not started: they are not shown as running
    statuses = [s.status for states in shown.values() for s in states]
    assert statuses.count(TaskStatus.RUNNING) == 2
    local.release.set()
    results = [await r for r in runs]
    assert all(o.status is TaskStatus.DONE for r in results for o in r.values())
    assert local.peak == 2 and len(local.calls) == 6
    waited = [o for r in results for o in r.values()]
    assert all(o.started is not None and o.ended is not None for o in waited)


async def test_hybrid_local_calls_take_the_slot_and_the_hosted_fallback_does_not() -> None:
    local, remote = Held("local", failing=["m/a"]), Held("remote")

    class Hybrid(ExpertRouter):
        def backends_for(self, task: str, model: ModelInfo) -> list[object]:  # type: ignore[override]
            return [local, remote]

    ex = Executor(Hybrid("hybrid", remote=remote, local=local), concurrency=1)  # type: ignore[arg-type]
    plan = wide(2)
    run = asyncio.create_task(ex.run(plan, models_for(plan, "m/a"), load_handle=no_file))
    await settle()
    assert (local.running, remote.running) == (1, 0)  # one local slot: the other task waits
    local.release.set()  # both fail locally, one after the other, and go to the service
    await settle()
    assert remote.running == 2  # the hosted calls hold no local slot
    remote.release.set()
    outcomes = await run
    assert [o.backend for o in outcomes.values()] == ["remote", "remote"]
    assert local.peak == 1


# --------------------------------------------------------------- speculation


class Recorder:
    """save_result / on_finished callbacks that record what was committed."""

    def __init__(self) -> None:
        self.saved: list[tuple[int, str | None]] = []
        self.finished: list[tuple[int, str | None]] = []

    async def save(self, o: TaskOutcome) -> TaskResult:
        assert o.result is not None
        self.saved.append((o.id, o.model.id if o.model else None))
        return o.result

    async def done(self, o: TaskOutcome) -> None:
        self.finished.append((o.id, o.model.id if o.model else None))


class Watch:
    """A progress listener a test can wait on: ``await watch.until(pred)``."""

    def __init__(self) -> None:
        self.states: tuple[TaskState, ...] = ()
        self._changed = asyncio.Condition()

    async def __call__(self, states: tuple[TaskState, ...]) -> None:
        async with self._changed:
            self.states = states
            self._changed.notify_all()

    async def until(self, pred: Callable[[tuple[TaskState, ...]], bool]) -> None:
        async with asyncio.timeout(10), self._changed:  # a bound for a broken run, not a timing
            await self._changed.wait_for(lambda: pred(self.states))

    def done(self, *ids: int) -> Callable[[tuple[TaskState, ...]], bool]:
        return lambda states: all(
            any(s.id == i and s.status is TaskStatus.DONE for s in states) for i in ids
        )


class Gated:
    """An expert whose every call waits for its own gate (model, input text),
    opened by the test; notes the calls, and the ones stopped midway."""

    name = "remote"

    def __init__(self, *, failing: Sequence[tuple[str, str]] = ()) -> None:
        self.failing = set(failing)
        self.calls: list[tuple[str, str | None]] = []
        self.stopped: list[tuple[str, str | None]] = []
        self.gates: dict[tuple[str, str | None], asyncio.Event] = {}

    def open(self, model_id: str, text: str) -> None:
        self.gates.setdefault((model_id, text), asyncio.Event()).set()

    def can_run(self, task: str, model: ModelInfo | None = None) -> bool:
        return True

    async def run(self, task: str, model: ModelInfo, inputs: TaskInputs) -> TaskResult:
        key = (model.id, inputs.text)
        self.calls.append(key)
        try:
            await self.gates.setdefault(key, asyncio.Event()).wait()
        except asyncio.CancelledError:
            self.stopped.append(key)
            raise
        if key in self.failing:
            raise RuntimeError("broken model")
        return TaskResult(text=f"{model.id}: {inputs.text}")

    async def aclose(self) -> None:
        pass


CHAIN = [
    PlannedTask(0, "summarization", [], {"text": "a long text"}),
    PlannedTask(1, "summarization", [0], {"text": "<resource>-0"}),
]
GUESS_REASONS = {0: "first guess", 1: "first guess"}


def speculate(
    remote: Gated,
    plan: Sequence[PlannedTask],
    guess: dict[int, list[ModelInfo]],
    choice: Awaitable[Assignment],
    rec: Recorder,
    watch: Watch,
    chosen: list[Assignment],
) -> asyncio.Task[dict[int, TaskOutcome]]:
    async def on_chosen(final: Assignment) -> None:
        assert rec.saved == []  # recorded before anything is committed
        chosen.append(final)

    ex = Executor(ExpertRouter("remote", remote=remote, local=None))  # type: ignore[arg-type]
    return asyncio.create_task(
        ex.run(
            plan, guess, load_handle=no_file, save_result=rec.save, on_finished=rec.done,
            listener=watch, reasons=GUESS_REASONS, choice=choice, on_chosen=on_chosen,
        )
    )  # fmt: skip


def first_models(a: Assignment) -> dict[int, str]:
    return {i: ms[0].id for i, ms in a.candidates.items()}


async def test_a_guess_the_choice_confirms_is_kept_and_committed_only_then() -> None:
    remote = Gated()
    remote.open("m/a", "a long text")
    guess = models_for(CHAIN, "m/a", "m/b")
    choice: asyncio.Future[Assignment] = asyncio.get_running_loop().create_future()
    rec, watch, chosen = Recorder(), Watch(), []
    run = speculate(remote, CHAIN, guess, choice, rec, watch, chosen)
    await watch.until(watch.done(0))
    await settle()
    # task 1 runs on task 0's guessed result while the choice is pending; nothing committed
    assert remote.calls == [("m/a", "a long text"), ("m/a", "m/a: a long text")]
    assert rec.saved == [] and rec.finished == []
    choice.set_result(Assignment(guess, {0: "fits", 1: "fits too"}))
    remote.open("m/a", "m/a: a long text")
    outcomes = await run
    assert len(remote.calls) == 2 and remote.stopped == []  # nothing ran again
    assert rec.saved == [(0, "m/a"), (1, "m/a")] and rec.finished == rec.saved
    assert [o.reason for o in outcomes.values()] == ["fits", "fits too"]
    assert [first_models(a) for a in chosen] == [{0: "m/a", 1: "m/a"}]


async def test_a_guess_that_finished_first_is_kept_when_the_choice_differs() -> None:
    remote = Gated()
    remote.open("m/a", "a long text")
    plan = [*CHAIN, PlannedTask(2, "summarization", [], {"text": "another"})]
    guess = models_for(plan, "m/a", "m/b")
    choice: asyncio.Future[Assignment] = asyncio.get_running_loop().create_future()
    rec, watch, chosen = Recorder(), Watch(), []
    run = speculate(remote, plan, guess, choice, rec, watch, chosen)
    await watch.until(watch.done(0))
    await settle()
    # the choice prefers m/b for every task: task 0 has finished on m/a already,
    # tasks 1 and 2 are still running on their guess
    choice.set_result(
        Assignment(models_for(plan, "m/b", "m/a"), {0: "better", 1: "better", 2: "better"})
    )
    await settle()
    assert sorted(remote.stopped) == [("m/a", "another"), ("m/a", "m/a: a long text")]
    remote.open("m/b", "m/a: a long text")  # task 1 reads the kept result of task 0
    remote.open("m/b", "another")
    outcomes = await run
    assert ("m/b", "a long text") not in remote.calls
    assert outcomes[0].model is not None and outcomes[0].model.id == "m/a"
    assert outcomes[0].result is not None and outcomes[0].result.text == "m/a: a long text"
    assert outcomes[0].reason == "first guess"
    assert [outcomes[i].model.id for i in (1, 2) if outcomes[i].model] == ["m/b", "m/b"]
    assert [outcomes[i].reason for i in (1, 2)] == ["better", "better"]
    assert outcomes[1].args["text"] == "m/a: a long text"
    assert sorted(rec.saved) == [(0, "m/a"), (1, "m/b"), (2, "m/b")]
    assert sorted(rec.finished) == sorted(rec.saved)  # one record per task
    ((final,),) = [chosen]
    assert first_models(final) == {0: "m/a", 1: "m/b", 2: "m/b"}
    assert final.reasons == {0: "first guess", 1: "better", 2: "better"}


async def test_a_running_guess_is_stopped_and_what_waits_starts_on_the_chosen_model() -> None:
    remote = Gated()
    guess = models_for(CHAIN, "m/a", "m/b")
    choice: asyncio.Future[Assignment] = asyncio.get_running_loop().create_future()
    rec, watch, chosen = Recorder(), Watch(), []
    run = speculate(remote, CHAIN, guess, choice, rec, watch, chosen)
    await settle()
    assert remote.calls == [("m/a", "a long text")]  # task 1 waits for task 0
    choice.set_result(Assignment(models_for(CHAIN, "m/b", "m/a"), {0: "better", 1: "better"}))
    await settle()
    assert remote.stopped == [("m/a", "a long text")]
    remote.open("m/b", "a long text")
    remote.open("m/b", "m/b: a long text")
    outcomes = await run
    # the dependent ran once, on the chosen model, with the chosen model's output
    assert remote.calls == [
        ("m/a", "a long text"),
        ("m/b", "a long text"),
        ("m/b", "m/b: a long text"),
    ]
    assert [o.model.id for o in outcomes.values() if o.model] == ["m/b", "m/b"]
    assert outcomes[0].attempts == ["remote:m/b"]  # the stopped run left nothing
    assert rec.saved == [(0, "m/b"), (1, "m/b")] and rec.finished == rec.saved


async def test_a_failed_guess_waits_for_the_choice_which_decides_the_fallback() -> None:
    remote = Gated(failing=[("m/a", "a long text")])
    remote.open("m/a", "a long text")
    remote.open("m/c", "a long text")
    remote.open("m/a", "m/c: a long text")
    guess = models_for(CHAIN, "m/a", "m/b", "m/c")
    choice: asyncio.Future[Assignment] = asyncio.get_running_loop().create_future()
    rec, watch, chosen = Recorder(), Watch(), []
    run = speculate(remote, CHAIN, guess, choice, rec, watch, chosen)
    await settle()
    # no fallback of its own: the task still runs, its dependent is not skipped
    assert remote.calls == [("m/a", "a long text")]
    assert [s.status for s in watch.states] == [TaskStatus.RUNNING, TaskStatus.PENDING]
    final = {0: [M("m/a"), M("m/c"), M("m/b")], 1: [M("m/a"), M("m/b"), M("m/c")]}
    choice.set_result(Assignment(final, {0: "chosen", 1: "chosen"}))
    outcomes = await run
    # the chosen m/a had failed already: the choice's next candidate, m/c, not m/b
    assert remote.calls == [
        ("m/a", "a long text"),
        ("m/c", "a long text"),
        ("m/a", "m/c: a long text"),
    ]
    assert outcomes[0].model is not None and outcomes[0].model.id == "m/c"
    # the failed guess, in the terse form the answer's language model reads
    assert outcomes[0].reason == "chosen (after: expert_crashed model='m/a' cause='RuntimeError')"
    assert outcomes[1].status is TaskStatus.DONE
    assert rec.saved == [(0, "m/c"), (1, "m/a")]


async def test_when_every_task_finishes_first_the_choice_is_cancelled() -> None:
    remote = Gated()
    remote.open("m/a", "a long text")
    remote.open("m/a", "m/a: a long text")
    guess = models_for(CHAIN, "m/a", "m/b")
    never, asked = asyncio.Event(), []

    async def choice() -> Assignment:
        try:
            await never.wait()  # an LLM that has not answered yet
        except asyncio.CancelledError:
            asked.append("cancelled")
            raise
        asked.append("answered")
        return Assignment(models_for(CHAIN, "m/b", "m/a"))

    rec, watch, chosen = Recorder(), Watch(), []
    outcomes = await speculate(remote, CHAIN, guess, choice(), rec, watch, chosen)
    assert asked == ["cancelled"]
    assert remote.calls == [("m/a", "a long text"), ("m/a", "m/a: a long text")]
    assert [o.reason for o in outcomes.values()] == ["first guess", "first guess"]
    ((final,),) = [chosen]  # the guesses are the models in force
    assert first_models(final) == {0: "m/a", 1: "m/a"} and final.reasons == GUESS_REASONS
    assert rec.saved == [(0, "m/a"), (1, "m/a")] and rec.finished == rec.saved


async def test_a_run_stopped_while_the_choice_is_made_stops_the_choice() -> None:
    remote = Gated()
    guess = models_for(CHAIN, "m/a", "m/b")
    never, asked = asyncio.Event(), []

    async def choice() -> Assignment:
        try:
            await never.wait()
        except asyncio.CancelledError:
            asked.append("cancelled")
            raise
        return Assignment(guess)

    rec, watch, chosen = Recorder(), Watch(), []
    run = speculate(remote, CHAIN, guess, choice(), rec, watch, chosen)
    await settle()
    assert remote.calls == [("m/a", "a long text")]
    run.cancel()  # e.g. the job is handed over at shutdown
    await asyncio.wait([run])
    await settle()
    assert asked == ["cancelled"] and remote.stopped == [("m/a", "a long text")]
    assert chosen == [] and rec.saved == [] and rec.finished == []


async def test_a_failing_choice_fails_the_run_as_itself() -> None:
    remote = Held("remote")
    remote.release.set()
    ex = Executor(ExpertRouter("remote", remote=remote, local=None))
    plan = wide(2)

    async def broken() -> Assignment:
        raise LookupError("store went away")

    try:
        await ex.run(plan, models_for(plan, "m/a"), load_handle=no_file, choice=broken())
    except LookupError as e:
        assert str(e) == "store went away"
    else:
        raise AssertionError("the choice's failure was swallowed")


# --------------------------------------------------------------------- reuse


async def test_the_same_model_on_the_same_input_in_a_conversation_runs_once() -> None:
    remote = Held("remote")
    remote.release.set()
    cache = ResultCache(max_entries=10)
    ex = Executor(ExpertRouter("remote", remote=remote, local=None), cache=cache)
    plan = wide(1)
    cands = models_for(plan, "m/a")
    first = await ex.run(plan, cands, load_handle=no_file, scope="conv-1")
    again = await ex.run(plan, cands, load_handle=no_file, scope="conv-1")
    other = await ex.run(plan, cands, load_handle=no_file, scope="conv-2")
    assert len(remote.calls) == 2  # once per conversation
    assert again[0].result == first[0].result and again[0].status is TaskStatus.DONE
    assert again[0].attempts == ["cache:m/a"] and again[0].backend == "remote"
    assert other[0].attempts == ["remote:m/a"]
    assert cache.stats().hits == 1 and cache.stats().misses == 2
