"""The engine: walks a compiled workflow as asyncio tasks, one per branch.

A branch walks from node to node. At a ``fan_out_all`` router it hands over
to one child branch per chosen edge (a *group*); the children meet at the
node that declares ``await:``, where the last one to report starts the
continuation. Branches hold a slot of ``max_parallel_branches`` while they
run and give it back while parked on ``wait`` or ``await_answers``.

The run stops at the first of: every branch ended (``finished``), a ``fail``
terminal (``failed``), a node error or exhausted budget
(``failed_resumable``), a pause for a person (``paused_waiting_human``) or a
cancel (``cancelled``). Stopping cancels the other branches; every branch's
current node stays in the checkpoint's frontier, so resume re-runs it.

Durability follows cost: the checkpoint after an agent, judge, llm router,
tool, human or await node is committed before the branch goes on (a crash
never re-runs such a node once it finished); after a cheap node it rides the
store's batch. An await_answers gate also commits one checkpoint when it first
waits on a visit (its deadline, in its frontier's ``resume``). The stop is
recorded in one commit with its event (status, checkpoint,
``run_finished``/``run_failed``/…). The engine runs under its
owner's lease: if the lease is lost (another process took the run), it stops
at once and writes nothing more.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from iterion_nb import safe_data
from iterion_nb.errors import LeaseLostError, NodeError, PauseRun
from iterion_nb.ir import model as m
from iterion_nb.ir.evaluate import ExpressionError, evaluate, truthy
from iterion_nb.runtime.ownership import this_host
from iterion_nb.runtime.ports import Backend, Store
from iterion_nb.runtime.records import RunStatus
from iterion_nb.runtime.scope import RenderError, Scope, loop_bound
from iterion_nb.runtime.state import Frontier, Group, RunState

#: Share of a budget at which ``budget_warning`` is emitted.
WARN_AT = 0.8
#: Node kinds whose finish is committed before the branch goes on: each cost a
#: model call, a side effect or a person's time (an llm router counts too).
COSTLY_KINDS = frozenset({"agent", "judge", "tool", "human", "await_answers"})

Emit = Callable[[str, dict[str, Any] | None], Awaitable[None]]
Guard = Callable[[], Awaitable[None]]


def costly(node: m.Node) -> bool:
    """Whether ``node``'s finish must be committed before anything after it starts."""
    return node.kind in COSTLY_KINDS or (isinstance(node, m.RouterNode) and node.mode == "llm")


class _Stop(Exception):  # noqa: N818 - internal: unwinds a branch after the run stopped
    pass


@dataclass
class NodeCtx:
    """The :class:`~iterion_nb.runtime.ports.NodeContext` handed to backends."""

    store: Store
    run_id: str
    node_id: str
    branch_id: str
    _emit: Emit = field(repr=False)

    _charge: Callable[[int, float], None] = field(repr=False)
    owner: str | None = None

    async def emit(self, event_type: str, data: dict[str, Any] | None = None) -> None:
        """Append an event attributed to this node and branch."""
        await self._emit(event_type, data)

    def charge(self, tokens: int, cost_usd: float) -> None:
        """Count usage against the run's budget."""
        self._charge(tokens, cost_usd)


@dataclass
class Outcome:
    """How the run stopped (``lost``: the lease went to another owner; write nothing)."""

    status: RunStatus
    error: str | None = None
    lost: bool = False


class Engine:
    """Runs one run of a workflow to its next stop."""

    def __init__(
        self,
        wf: m.Workflow,
        store: Store,
        backend: Backend | None,
        run_id: str,
        state: RunState,
        *,
        owner: str,
        workdir: Path,
        poll_interval: float = 5.0,
        park: bool = False,
        guard: Guard | None = None,
    ) -> None:
        from iterion_nb.runtime.nodes import NodeRunner

        #: The claimant id whose lease this engine runs under.
        self.owner = owner
        #: Whether the run was cancelled by cancelling its task (not by ``stop``).
        self.cancelled_by_task = False
        #: Whether a pause keeps the lease (the owner resumes the run when answered).
        self.park = park
        self._guard = guard
        self.wf = wf
        self.store = store
        self.backend = backend
        self.run_id = run_id
        self.state = state
        self.workdir = workdir
        self.poll_interval = poll_interval
        self.status: RunStatus = "running"
        self.outcome: Outcome | None = None
        self._settling = False  # _finish has read the outcome: a later stop changes nothing
        self._recording: set[str] = set()  # branches recording a node that just finished
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._active = 0
        #: Set whenever a branch ends (a gate waiting for answers may now be alone).
        self.branch_ended = asyncio.Event()
        self._settled = asyncio.Event()
        limit = wf.budget.max_parallel_branches
        self._slots = asyncio.Semaphore(limit) if limit else None
        self._events: dict[str, asyncio.Event] = {}
        self._started = time.monotonic()
        self._elapsed_before = state.usage.elapsed_seconds
        self._in_loops = _nodes_in_loops(wf)
        self._joins = {name: _join_of(wf, name) for name in wf.nodes}
        self._nodes = NodeRunner(self)

    # -- helpers for node executors -----------------------------------------
    def event_for(self, node: str | None, branch: str | None) -> Emit:
        """An emitter of events attributed to ``node`` on ``branch``."""

        async def emit(event_type: str, data: dict[str, Any] | None = None) -> None:
            await self.store.append_event(
                self.run_id, event_type, data or {}, node_id=node, branch_id=branch
            )

        return emit

    def context_for(self, node: str, branch: str) -> NodeCtx:
        """The context a backend gets for one node call."""
        return NodeCtx(
            self.store,
            self.run_id,
            node,
            branch,
            self.event_for(node, branch),
            self.charge,
            owner=self.owner,
        )

    def charge(self, tokens: int, cost: float) -> None:
        """Count model usage against the budget."""
        self.state.usage.tokens += tokens
        self.state.usage.cost_usd += cost

    def fire(self, event: str, payload: Any) -> None:
        """Fire a sticky run-local event (``emit``)."""
        self.state.fired[event] = payload
        self._events.setdefault(event, asyncio.Event()).set()

    async def wait_for_event(self, event: str, timeout: float) -> bool:
        """Wait until ``event`` fires; False on timeout."""
        if event in self.state.fired:
            return True
        waiter = self._events.setdefault(event, asyncio.Event())
        try:
            await asyncio.wait_for(waiter.wait(), timeout)
        except TimeoutError:
            return False
        return True

    @contextlib.asynccontextmanager
    async def parked(self, f: Frontier) -> AsyncIterator[None]:
        """Give the branch's slot back while it waits; take it back on wake."""
        if self._slots is not None:
            self._slots.release()
        try:
            yield
        finally:
            if self._slots is not None:
                await self._slots.acquire()

    async def commit_checkpoint(self) -> None:
        """Commit a checkpoint (and the events before it) before returning.

        What a node keeps to go on after a stop (its frontier's ``resume``)
        then survives this process, even a kill -9 a moment later.
        """
        await self._save(durable=True)

    # -- the run -----------------------------------------------------------
    async def run(self, resumed: bool = False) -> RunStatus:
        """Run until the next stop; record it and return the status."""
        # which process executes it from here: a resume after a crash names the one taking over
        where = {"pid": os.getpid(), "host": this_host()}
        await self.event_for(None, None)("run_resumed" if resumed else "run_started", where)
        if not resumed:  # a checkpoint from the start (with the event, in one batch): whoever
            await self._save()  # takes the run over resumes it, and never starts it twice
        watchdog = asyncio.ensure_future(self._watch_duration())
        for entry in list(self.state.frontier.values()) if self.outcome is None else []:
            # restored by a resume: its node's next execution may re-run one begun before
            # (its questions then reuse those posted: backends/reask.py); every other is new
            entry.restored = resumed
            self._spawn(entry)  # (a run stopped before it runs spawns no branch)
        if self._active == 0:
            self._settled.set()
        try:
            await self._settled.wait()
        except asyncio.CancelledError:  # its task, from outside: the loop stopping, say
            self.cancelled_by_task = True
            self.stop(Outcome("cancelled"))
        watchdog.cancel()
        await self._halt_branches()
        return await self._finish()

    def stop(self, outcome: Outcome) -> None:
        """Stop the run (the first reason wins; losing the lease overrides any)."""
        if self.outcome is None or outcome.lost:
            self.outcome = outcome
        self._settled.set()

    def cancel(self) -> None:
        """A person's cancel: it also beats a pause not yet recorded.

        A person who cancels a run on its way to a gate wants it stopped, not
        waiting for an answer. (A session closing stops its runs with
        :meth:`stop`: a pause it meets stays a pause.)
        """
        pausing = self.outcome is not None and self.outcome.status == "paused_waiting_human"
        if pausing and not self._settling:
            self.outcome = None
        self.stop(Outcome("cancelled"))

    def lose(self) -> None:
        """Another owner took the run: stop now and record nothing more."""
        self.stop(Outcome("interrupted", "another process took the run over", lost=True))

    async def _halt_branches(self) -> None:
        """Cancel the branches, except one recording a finished node: it stops at its next step.

        That branch checkpoints where it goes next, so a finished node (an agent's
        paid-for turns, a tool's side effects) is never run again on resume.
        """
        tasks = {b: t for b, t in self._tasks.items() if not t.done()}
        for branch, task in tasks.items():
            if branch not in self._recording:
                task.cancel()
        await asyncio.gather(*tasks.values(), return_exceptions=True)

    async def _finish(self) -> RunStatus:
        self._settling = True
        outcome = self.outcome or Outcome("finished")
        state = self.state
        state.usage.elapsed_seconds = self._elapsed_before + time.monotonic() - self._started
        self.status = outcome.status
        if outcome.lost:
            return outcome.status
        event: tuple[str, dict[str, Any]]
        if outcome.status == "finished":
            state.frontier.clear()
            event = ("run_finished", {"outputs": sorted(state.outputs)})
        elif outcome.status == "paused_waiting_human":
            event = ("run_paused", {"interaction_id": state.pending_interaction})
        elif outcome.status == "cancelled":
            event = ("run_cancelled", {})
        else:
            resumable = outcome.status == "failed_resumable"
            event = ("run_failed", {"error": outcome.error, "resumable": resumable})
        keep = self.park and outcome.status == "paused_waiting_human"
        try:
            settled = await self.store.settle_run(
                self.run_id, self.owner, status=outcome.status, error=outcome.error,
                checkpoint=state.checkpoint(), event=event, keep_lease=keep,
            )  # fmt: skip
        except LeaseLostError:
            self.status = "interrupted"
            return self.status
        # (finished or failed withdrew its open questions; a pause with a cancel pending
        # was recorded cancelled: ownership.cancel_wins)
        if settled.status == "cancelled":
            self.status = "cancelled"
        return self.status

    async def _watch_duration(self) -> None:
        limit = self.wf.budget.max_duration_seconds
        if limit is None:
            return
        used = self._elapsed_before
        if used < WARN_AT * limit:
            await asyncio.sleep(WARN_AT * limit - used)
        await self._warn("max_duration", limit, self._elapsed_before + self._elapsed())
        await asyncio.sleep(max(0.0, limit - self._elapsed_before - self._elapsed()))
        await self._exceeded("max_duration", limit, self._elapsed_before + self._elapsed())

    def _typed_end(self, spec: m.FailSpec, f: Frontier) -> Outcome:
        """How a run ends at ``fail NAME:``: its status, and ``[code] message`` as the error."""
        message = f"the workflow reached '{spec.name}'"
        if spec.message is not None:
            scope = Scope(self.wf, self.state, self.run_id, f.input, self.elapsed_total())
            try:
                message = scope.render(spec.message)
            except RenderError as err:
                message = f"{message} ({err})"
        error = f"[{spec.code}] {message}" if spec.code else message
        return Outcome("failed_resumable" if spec.resumable else "failed", error)

    def _elapsed(self) -> float:
        return time.monotonic() - self._started

    def elapsed_total(self) -> float:
        """Seconds the run has executed, over every process that executed it."""
        return self._elapsed_before + self._elapsed()

    # -- budget ------------------------------------------------------------
    async def _warn(self, kind: str, limit: float, used: float) -> None:
        if kind in self.state.warned:
            return
        self.state.warned.append(kind)
        data = {"kind": kind, "limit": limit, "used": used}
        await self.event_for(None, None)("budget_warning", data)

    async def _exceeded(self, kind: str, limit: float, used: float) -> None:
        data = {"kind": kind, "limit": limit, "used": used}
        await self.event_for(None, None)("budget_exceeded", data)
        message = f"budget exceeded: {kind} (limit {limit:g}, used {used:g})"
        self.stop(Outcome("failed_resumable", message))

    async def _check_budget(self) -> bool:
        """Warn near a limit; stop the run past one. True when the run may go on."""
        budget, usage = self.wf.budget, self.state.usage
        checks = (
            ("max_tokens", budget.max_tokens, usage.tokens),
            ("max_cost_usd", budget.max_cost_usd, usage.cost_usd),
            ("max_iterations", budget.max_iterations, usage.iterations),
        )
        for kind, limit, used in checks:
            if limit is None:
                continue
            if used >= limit:
                await self._exceeded(kind, limit, used)
                return False
            if used >= WARN_AT * limit:
                await self._warn(kind, limit, used)
        return True

    # -- branches ----------------------------------------------------------
    def alone(self) -> bool:
        """Whether one branch is left (the caller's): nothing else of the run works."""
        return self._active == 1

    def _spawn(self, f: Frontier) -> None:
        self.state.frontier[f.branch] = f
        self._active += 1
        self._tasks[f.branch] = asyncio.ensure_future(self._branch(f))

    async def _branch(self, f: Frontier) -> None:
        try:
            if self._slots is not None:
                await self._slots.acquire()
            try:
                await self._walk(f)
            finally:
                if self._slots is not None:
                    self._slots.release()
        except (asyncio.CancelledError, _Stop):
            pass
        except PauseRun as pause:
            current = self.state.frontier.get(f.branch)
            if current is not None:
                current.resume = dict(pause.state)
            self.state.pending_interaction = pause.interaction_id
            waiting = pause.state.get("interactions")
            self.state.waiting_on = (
                [str(i) for i in waiting] if isinstance(waiting, list) else [pause.interaction_id]
            )
            self.stop(Outcome("paused_waiting_human"))
        except Exception as err:  # a node failed: the branch or the run stops
            await self._branch_failed(f, err)
        finally:
            self._active -= 1
            self.branch_ended.set()
            if self._active == 0:
                self._settled.set()

    async def _walk(self, f: Frontier) -> None:
        while True:
            if self.outcome is not None:
                raise _Stop
            self.state.frontier[f.branch] = f
            if f.node == "done":
                self.state.reached_done = True
                await self._end_branch(f, "done")
                return
            if f.node == "fail":
                await self._end_branch(f, "fail")
                self.stop(Outcome("failed", "the workflow reached 'fail'"))
                return
            if f.node in self.wf.fails:
                spec = self.wf.fails[f.node]
                outcome = self._typed_end(spec, f)
                if spec.resumable and f.came_from in self.wf.nodes:
                    # a resume runs the node that led here again, from its own input
                    again = Frontier(f.branch, f.came_from, f.retry_input, list(f.groups))
                    self.state.frontier[f.branch] = again
                else:
                    await self._end_branch(f, "fail")
                self.stop(outcome)
                return
            node = self.wf.nodes[f.node]
            if node.await_mode is not None and f.groups and not f.joined:
                await self._arrive(f)
                return
            if not await self._check_budget():
                raise _Stop
            durable = costly(node)
            if durable:
                await self._check_lease()
            branch = f.branch
            try:
                output = await self._run_node(node, f)
                nexts = await self._select(node, output, f)
                if not nexts:
                    await self._end_branch(f, "end", durable=durable)
                    return
                if len(nexts) == 1:
                    f = nexts[0]
                    self.state.frontier[f.branch] = f
                    await self._save(durable)
                    continue
                await self._fan_out(node, f, nexts, durable=durable)
                return
            finally:
                self._recording.discard(branch)

    async def _run_node(self, node: m.Node, f: Frontier) -> Any:
        emit = self.event_for(node.name, f.branch)
        started: dict[str, Any] = {"kind": node.kind, "input": f.input}
        if isinstance(node, m.AwaitAnswersNode):  # whose questions it waits on (None: all)
            started["from"] = node.from_node
        await emit("node_started", started)
        self.state.usage.iterations += 1
        try:
            output = await self._nodes.run(node, f)
            unfit = safe_data.problem(output)  # what the store could not keep fails the node
            if unfit is not None:
                raise NodeError(node.name, f"output {unfit}")
        except LeaseLostError:  # it asked a question of a run another process took over
            self.lose()
            raise _Stop from None
        except Exception as err:  # the node's own record of its failure, then the usual path
            message = str(err) if isinstance(err, NodeError) else f"node '{node.name}': {err}"
            message = safe_data.printable(message)
            await emit("node_failed", {"kind": node.kind, "error": message})
            raise
        # from here the node is done: a stop lets the branch record it and move on first
        # (halted now, its output would be lost and the node run again on resume)
        self._recording.add(f.branch)
        state = self.state
        state.visits[node.name] = state.visits.get(node.name, 0) + 1
        state.outputs[node.name] = output
        if node.name in self._in_loops:
            state.history.setdefault(node.name, []).append(output)
        await emit("node_finished", {"kind": node.kind, "output": output})
        publish = getattr(node, "publish", None)
        if publish:
            await self._check_lease()  # a process that froze during the node publishes nothing
            artifact = await self.store.put_artifact(self.run_id, node.name, publish, output)
            state.artifacts[publish] = {"version": artifact.version, "value": output}
            await emit("artifact_written", {"name": publish, "version": artifact.version})
        return output

    async def _check_lease(self) -> None:
        """Before a costly node: make sure this process still owns the run."""
        if self._guard is None:
            return
        try:
            await self._guard()
        except LeaseLostError:
            self.lose()
            raise _Stop from None

    async def _save(self, durable: bool = False) -> None:
        """Checkpoint; ``durable`` commits it (and the events before it) before returning."""
        try:
            await self.store.save_checkpoint(
                self.run_id, self.state.checkpoint(), owner=self.owner, durable=durable
            )
        except LeaseLostError:
            self.lose()  # the branch stops at its next step

    async def _end_branch(self, f: Frontier, how: str, *, durable: bool = False) -> None:
        self.state.frontier.pop(f.branch, None)
        if f.groups:
            await self.event_for(None, f.branch)("branch_finished", {"how": how})
            group = self.state.groups[f.groups[-1]]
            group.ended.append(f.branch)
            await self._report(group)
        await self._save(durable)

    async def _branch_failed(self, f: Frontier, err: Exception) -> None:
        message = str(err) if isinstance(err, NodeError) else f"node '{f.node}': {err}"
        message = safe_data.printable(message)  # a backend's text may hold U+0000
        group = self.state.groups.get(f.groups[-1]) if f.groups else None
        if group is not None and group.mode == "best_effort":
            self.state.frontier.pop(f.branch, None)
            group.failed[f.branch] = message
            emit = self.event_for(f.node, f.branch)
            await emit("branch_finished", {"how": "failed", "error": message})
            try:
                await self._report(group)
            except NodeError as join_error:
                self.stop(Outcome("failed_resumable", str(join_error)))
            await self._save()
            return
        self.stop(Outcome("failed_resumable", message))

    # -- fan-out and join ----------------------------------------------------
    async def _fan_out(
        self, node: m.Node, f: Frontier, children: list[Frontier], *, durable: bool = False
    ) -> None:
        join = self._joins.get(node.name)
        mode = self.wf.nodes[join].await_mode if join else None
        group = Group(
            self.state.new_id("g"), node.name, f.branch, list(f.groups), len(children), mode
        )
        self.state.groups[group.id] = group
        self.state.frontier.pop(f.branch, None)
        started = []
        for child in children:
            child.branch = self.state.new_id("b")
            child.groups = [*f.groups, group.id]
            self.state.frontier[child.branch] = child
            started.append(child)
        await self._save(durable)
        for child in started:
            await self.event_for(node.name, child.branch)(
                "branch_started", {"group": group.id, "parent": f.branch, "node": child.node}
            )
            self._spawn(child)

    async def _arrive(self, f: Frontier) -> None:
        group = self.state.groups[f.groups[-1]]
        group.arrived[f.branch] = {
            "node": f.node,
            "input": f.input,
            "from": f.came_from,
            "mapped": f.mapped,
        }
        self.state.frontier.pop(f.branch, None)
        await self.event_for(None, f.branch)("branch_finished", {"how": "joined", "node": f.node})
        await self._report(group)
        await self._save()

    async def _report(self, group: Group) -> None:
        """Start the join's continuation once every branch of ``group`` has reported."""
        if not group.complete:
            return
        del self.state.groups[group.id]
        joins: dict[str, list[dict[str, Any]]] = {}
        for arrival in group.arrived.values():
            joins.setdefault(arrival["node"], []).append(arrival)
        if not joins:
            if group.failed:
                failures = "; ".join(group.failed.values())
                raise NodeError(group.router, f"every branch failed: {failures}")
            await self._parent_ended(group)
            return
        for node, arrivals in joins.items():
            # Inputs built by `with` mappings merge; plain outputs are keyed by
            # the node that produced them, so two reviewers do not collide.
            merged: dict[str, Any] = {}
            for arrival in arrivals:
                if arrival["mapped"] and isinstance(arrival["input"], dict):
                    merged.update(arrival["input"])
                else:
                    merged[arrival["from"] or "input"] = arrival["input"]
            await self.event_for(node, group.parent)(
                "join_ready",
                {
                    "group": group.id,
                    "arrived": sorted(group.arrived),
                    "failed": group.failed,
                    "ended": group.ended,
                },
            )
            self._spawn(
                Frontier(group.parent, node, merged, list(group.parent_groups), joined=True)
            )

    async def _parent_ended(self, group: Group) -> None:
        if group.parent_groups:
            outer = self.state.groups[group.parent_groups[-1]]
            outer.ended.append(group.parent)
            await self._report(outer)

    # -- choosing edges --------------------------------------------------------
    async def _select(self, node: m.Node, output: Any, f: Frontier) -> list[Frontier]:
        edges = self.wf.outgoing(node.name)
        if not edges:
            return []
        if isinstance(node, m.RouterNode):
            chosen = await self._route(node, f, edges)
        else:
            chosen = self._first_match(node, edges, output, f)
        scope = Scope(self.wf, self.state, self.run_id, f.input, self.elapsed_total())
        emit = self.event_for(node.name, f.branch)
        nexts = []
        for edge in chosen:
            if edge.loop is not None:
                self.state.loops[edge.loop] = self.state.loops.get(edge.loop, 0) + 1
                self.state.loop_outputs[edge.loop] = output
            try:
                value = {key: scope.value(t) for key, t in edge.mapping} if edge.mapping else output
            except RenderError as err:
                raise NodeError(node.name, f"edge to '{edge.dst}': {err}") from None
            data: dict[str, Any] = {"from": node.name, "to": edge.dst, "loop": edge.loop}
            if edge.loop:
                data["iteration"] = self.state.loops[edge.loop]
            await emit("edge_selected", data)
            nexts.append(
                Frontier(
                    f.branch,
                    edge.dst,
                    value,
                    list(f.groups),
                    came_from=node.name,
                    mapped=bool(edge.mapping),
                    retry_input=f.input if edge.dst in self.wf.fails else None,
                )
            )
        return nexts

    def _open(self, edge: m.Edge, f: Frontier) -> bool:
        if edge.loop is None:
            return True
        return self.state.loops.get(edge.loop, 0) < self._loop_max(edge.loop, f)

    def _loop_max(self, name: str, f: Frontier) -> int:
        """A loop's bound: as declared, or read from the run now (``as l("{{ref}}")``)."""
        loop = self.wf.loops[name]
        if loop.bound is None:
            return loop.max_iterations
        scope = Scope(self.wf, self.state, self.run_id, f.input, self.elapsed_total())
        try:
            return loop_bound(loop, scope.value(loop.bound))
        except RenderError as err:
            raise NodeError(
                f.node, f"loop '{name}': its bound {loop.bound_source!r}: {err}"
            ) from None

    def _holds(self, edge: m.Edge, bare: Any, f: Frontier) -> bool:
        cond = edge.condition
        if cond is None:
            return True
        fields = bare if isinstance(bare, dict) else {}
        if isinstance(cond, m.FieldCondition):
            return truthy(fields.get(cond.field)) != cond.negated
        names = Scope(self.wf, self.state, self.run_id, f.input, self.elapsed_total()).namespaces()
        try:
            return truthy(evaluate(cond.expr, names, fields))
        except ExpressionError as err:
            raise NodeError(f.node, f"condition {cond.source!r}: {err}") from None

    def _first_match(
        self, node: m.Node, edges: tuple[m.Edge, ...], bare: Any, f: Frontier
    ) -> list[m.Edge]:
        exhausted = None
        # conditions first; then a loop edge while it is open; then the fallback
        ordered = (
            [e for e in edges if e.condition is not None]
            + [e for e in edges if e.condition is None and e.loop is not None]
            + [e for e in edges if e.condition is None and e.loop is None]
        )
        for edge in ordered:
            if self._holds(edge, bare, f):
                if self._open(edge, f):
                    return [edge]
                exhausted = exhausted or edge
        if exhausted is not None and exhausted.loop is not None:
            bound = self._loop_max(exhausted.loop, f)
            raise NodeError(node.name, f"loop '{exhausted.loop}' is exhausted ({bound} iterations)")
        raise NodeError(node.name, "no outgoing edge matches its output")

    async def _route(
        self, node: m.RouterNode, f: Frontier, edges: tuple[m.Edge, ...]
    ) -> list[m.Edge]:
        if node.mode == "fan_out_all":
            taken = [
                e
                for e in edges
                if not e.otherwise and self._holds(e, f.input, f) and self._open(e, f)
            ]
            return taken or [e for e in edges if e.otherwise and self._open(e, f)]
        if node.mode == "condition":
            return self._first_match(node, edges, f.input, f)
        if node.mode == "round_robin":
            turn = self.state.rotation.get(node.name, 0)
            self.state.rotation[node.name] = turn + 1
            return [edges[turn % len(edges)]]
        return await self._llm_route(node, f, edges)

    async def _llm_route(
        self, node: m.RouterNode, f: Frontier, edges: tuple[m.Edge, ...]
    ) -> list[m.Edge]:
        scope = Scope(self.wf, self.state, self.run_id, f.input, self.elapsed_total())
        request = self._nodes._request("route", node, f, scope, choices=tuple(e.dst for e in edges))
        picked = (await self._nodes._call_backend(request)).output
        names = [picked] if isinstance(picked, str) else list(picked or [])
        chosen = [e for e in edges if e.dst in names]
        if not chosen:
            options = ", ".join(e.dst for e in edges)
            raise NodeError(node.name, f"the model chose {picked!r}, not one of {options}")
        return chosen if node.multi else chosen[:1]


def _nodes_in_loops(wf: m.Workflow) -> set[str]:
    """Nodes on a cycle through a loop edge: their outputs keep a history."""
    succ: dict[str, list[str]] = {}
    pred: dict[str, list[str]] = {}
    for edge in wf.edges:
        succ.setdefault(edge.src, []).append(edge.dst)
        pred.setdefault(edge.dst, []).append(edge.src)
    members: set[str] = set()
    for edge in wf.edges:
        if edge.loop is not None:
            members |= _reach(edge.dst, succ) & _reach(edge.src, pred)
    return members


def _reach(start: str, succ: dict[str, list[str]]) -> set[str]:
    seen, todo = {start}, [start]
    while todo:
        for nxt in succ.get(todo.pop(), []):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def _join_of(wf: m.Workflow, router: str) -> str | None:
    """The node where a fan-out router's branches meet (first node declaring await)."""
    node = wf.nodes[router]
    if not (isinstance(node, m.RouterNode) and node.mode in ("fan_out_all", "llm")):
        return None
    found: set[str] = set()
    todo = [e.dst for e in wf.outgoing(router)]
    seen = set(todo)
    while todo:
        name = todo.pop()
        target = wf.nodes.get(name)
        if target is None:
            continue
        if target.await_mode is not None:
            found.add(name)
            continue
        for edge in wf.outgoing(name):
            if edge.loop is None and edge.dst not in seen:
                seen.add(edge.dst)
                todo.append(edge.dst)
    return next(iter(found)) if len(found) == 1 else None
