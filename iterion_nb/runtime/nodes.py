"""What each node kind does when it runs. The engine decides when and where.

Every executor returns the node's output (JSON data) or raises: a
:class:`~iterion_nb.errors.NodeError` to fail the node resumably, or
:class:`~iterion_nb.errors.PauseRun` to pause the run for a person.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shlex
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from iterion_nb.errors import ConflictError, LeaseLostError, NodeError, PauseRun, VarsError
from iterion_nb.ir import model as m
from iterion_nb.ir.cursors import calibration
from iterion_nb.ir.evaluate import ExpressionError, evaluate
from iterion_nb.ir.templates import RefPart, Template
from iterion_nb.runtime import lifecycle, reaper, replay
from iterion_nb.runtime.doorbell import node_key
from iterion_nb.runtime.ports import Backend, BackendRequest, BackendResult, Store
from iterion_nb.runtime.project_mcp import ProjectMcpError, agent_servers
from iterion_nb.runtime.records import Interaction, answer_text, utcnow
from iterion_nb.runtime.scope import RenderError, Scope
from iterion_nb.runtime.state import Frontier, RunState
from iterion_nb.runtime.values import check_record, expand_env

if TYPE_CHECKING:
    from iterion_nb.runtime.engine import Engine

#: How much of a failing command's stderr the error keeps.
STDERR_TAIL = 4000


class NodeRunner:
    """Runs single nodes for an :class:`~iterion_nb.runtime.engine.Engine`."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.wf: m.Workflow = engine.wf
        self.store: Store = engine.store
        self.state: RunState = engine.state

    async def run(self, node: m.Node, f: Frontier) -> Any:
        """Run ``node`` for branch ``f`` and return its output."""
        scope = Scope(self.wf, self.state, self.engine.run_id, f.input, self.engine.elapsed_total())
        try:
            if isinstance(node, m.AgentNode):
                return await self._agent(node, f, scope)
            if isinstance(node, m.RouterNode):
                return f.input
            if isinstance(node, m.HumanNode):
                return await self._human(node, f, scope)
            if isinstance(node, m.ToolNode):
                return await self._tool(node, f, scope)
            if isinstance(node, m.ComputeNode):
                return self._compute(node, f, scope)
            if isinstance(node, m.EmitNode):
                return await self._emit(node, scope)
            if isinstance(node, m.WaitNode):
                return await self._wait(node, f)
            return await self._await_answers(node, f)
        except RenderError as err:
            raise NodeError(node.name, str(err)) from None

    # -- shared ------------------------------------------------------------
    def _schema(self, name: str | None) -> m.Schema | None:
        return self.wf.schemas[name] if name else None

    def checked(self, node: m.Node, output: Any, schema_name: str | None) -> Any:
        """``output`` if it fits the node's output schema, else a NodeError naming the field."""
        schema = self._schema(schema_name)
        if schema is None:
            return output
        problems = check_record(output, schema)
        if problems:
            raise NodeError(
                node.name, f"output does not match schema '{schema.name}': {'; '.join(problems)}"
            )
        return output

    async def _call_backend(self, request: BackendRequest) -> BackendResult:
        backend: Backend | None = self.engine.backend
        if backend is None:
            raise NodeError(
                request.node.name,
                "no backend is configured for LLM nodes: pass backend= to the Session",
            )
        emit = self.engine.event_for(request.node.name, request.branch_id)
        own_steps = getattr(backend, "reports_steps", False)
        if not own_steps:
            await emit("llm_request", {"purpose": request.purpose, "model": request.model})
        try:
            result = await backend.call(request)
        except (NodeError, PauseRun, LeaseLostError):
            raise
        except Exception as err:
            raise NodeError(request.node.name, f"backend failed: {err}") from err
        if own_steps:
            return result
        await emit(
            "llm_step_finished",
            {"tokens_in": result.tokens_in, "tokens_out": result.tokens_out,
             "cost_usd": result.cost_usd},
        )  # fmt: skip
        self.engine.charge(result.tokens_in + result.tokens_out, result.cost_usd)
        return result

    def _request(
        self, purpose: Any, node: m.Node, f: Frontier, scope: Scope, **extra: Any
    ) -> BackendRequest:
        system = getattr(node, "system", None)
        user = getattr(node, "user", None)
        model = getattr(node, "model", None)
        return BackendRequest(
            purpose=purpose,
            run_id=self.engine.run_id,
            node=node,
            branch_id=f.branch,
            system=scope.render(system) if system else "",
            user=scope.render(user) if user else "",
            input=f.input,
            model=scope.render(model) if model else None,
            context=self.engine.context_for(node.name, f.branch),
            resume=f.resume,
            visit=self.state.visits.get(node.name, 0),
            in_branch=bool(f.groups),
            workdir=str(self.engine.workdir),
            reasoning_effort=_effort(node),
            rerun=f.restored,
            **extra,
        )

    # -- agents and judges -------------------------------------------------
    def _user_blocks(self, node: m.AgentNode, scope: Scope) -> tuple[dict[str, Any], ...]:
        """The user prompt cut at each image attachment it shows (upstream's vision input).

        ``{{attachments.X}}`` or ``{{attachments.X.path}}`` of an ``image`` attachment
        becomes an image block; the text around it, text blocks. Empty when none.
        """
        if node.user is None:
            return ()
        images = {n for n, a in self.wf.attachments.items() if a.kind == "image"}

        def image_of(part: object) -> str | None:
            if not isinstance(part, RefPart) or part.path[0] != "attachments":
                return None
            path = part.path
            shown = len(path) == 2 or (len(path) == 3 and path[2] == "path")
            return path[1] if shown and path[1] in images else None

        if not any(image_of(p) for p in node.user.parts):
            return ()
        blocks: list[dict[str, Any]] = []
        chunk: list[Any] = []
        for part in (*node.user.parts, None):
            name = image_of(part)
            if name is None and part is not None:
                chunk.append(part)
                continue
            text = scope.render(Template(tuple(chunk))) if chunk else ""
            if text.strip():
                blocks.append({"type": "text", "text": text})
            chunk = []
            given = self.state.attachments.get(name or "")
            if given:
                blocks.append({"type": "image", "path": given["path"], "media_type": given["mime"]})
        return tuple(blocks)

    def _calibration(self, node: m.AgentNode) -> str:
        """The node's cursors' fragments (``${ENV}`` settings read now; an unset one skipped)."""
        chosen: dict[str, str] = {}
        for name, setting in node.cursors:
            try:
                chosen[name] = expand_env(setting)
            except VarsError:
                continue  # as upstream: a setting that picks nothing adds nothing
        return calibration(self.wf.cursors, chosen)

    async def _agent(self, node: m.AgentNode, f: Frontier, scope: Scope) -> Any:
        try:
            servers = agent_servers(self.wf, node, Path(self.engine.workdir))
        except ProjectMcpError as err:
            raise NodeError(node.name, str(err)) from None
        request = self._request(
            "agent", node, f, scope, output_schema=self._schema(node.output), mcp_servers=servers
        )
        blocks = self._user_blocks(node, scope)
        if blocks:
            request = replace(request, user_blocks=blocks)
        calibrated = self._calibration(node)
        if calibrated:
            system = f"{request.system}\n\n{calibrated}" if request.system else calibrated
            request = replace(request, system=system)
        parent = self._parent_session(node, f) if f.resume is None else None
        if parent is not None:
            request = replace(
                request, session=self.state.sessions[parent], fork=node.session == "fork"
            )
        result = await self._call_backend(request)
        if result.session is not None:
            self.state.sessions[node.name] = result.session
            if parent is not None and node.session != "fork":
                self.state.sessions[parent] = result.session  # one conversation, continued
        f.resume = None
        output = result.output
        if node.output is None and isinstance(output, str):
            output = _object_or_text(output)
        return self.checked(node, output, node.output)

    def _parent_session(self, node: m.AgentNode, f: Frontier) -> str | None:
        """The node whose conversation this one continues (or forks), if its mode says so.

        Named by ``_session_id`` in the node's input (upstream's way: ``with {
        _session_id: "{{outputs.worker._session_id}}" }``), else the node it came
        from. ``inherit_if_available`` starts fresh when there is none.

        Raises:
            NodeError: ``inherit`` or ``fork`` with no conversation to continue.
        """
        if node.session not in m.CONTINUING:
            return None
        named = f.input.get("_session_id") if isinstance(f.input, dict) else None
        parent = named if isinstance(named, str) and named else f.came_from
        if parent is not None and parent in self.state.sessions:
            return parent
        if node.session == "inherit_if_available":
            return None
        where = f"'{parent}' has no conversation yet" if parent else "no node came before it"
        raise NodeError(
            node.name,
            f"session: {node.session} has nothing to continue: {where} (pass"
            ' _session_id: "{{outputs.NODE._session_id}}" with the edge into it)',
        )

    # -- human gates -------------------------------------------------------
    async def _human(self, node: m.HumanNode, f: Frontier, scope: Scope) -> Any:
        question = scope.render(node.instructions) if node.instructions else f"{node.name}?"
        waiting = (f.resume or {}).get("interactions")
        if waiting:
            return await self._human_answered(node, f, waiting)
        if node.interaction in ("llm", "llm_or_human"):
            request = self._request(
                "human", node, f, scope, output_schema=self._schema(node.output)
            )
            request = replace(request, user=request.user or question)
            answer = (await self._call_backend(request)).output
            if isinstance(answer, str) and node.output is not None:
                parsed = _object_or_text(answer)  # a model answering a form writes JSON
                answer = parsed if "text" not in parsed or len(parsed) > 1 else answer
            if answer is not None:
                output = self._human_output(node, answer)  # checked against the form
                if node.interaction == "llm_or_human" and node.min_answers > 1:
                    # the shape people's answers give, so the next node reads it alike
                    return {"text": answer_text(answer), "answers": [answer]}
                return output
            if node.interaction == "llm":
                raise NodeError(node.name, "the model gave no answer (interaction: llm)")
        ids = [
            await self._ask_person(node, f, question, index) for index in range(node.min_answers)
        ]
        f.resume = {"interactions": ids}
        records = [await self.store.get_interaction(i) for i in ids]
        if all(not r.pending for r in records):  # answered while its last owner was dead
            return await self._human_answered(node, f, ids)
        raise PauseRun(next(r.id for r in records if r.pending), {"interactions": ids})

    async def _ask_person(self, node: m.HumanNode, f: Frontier, question: str, index: int) -> str:
        """Record one question of a human gate; a gate re-run after a crash reuses its own.

        The id depends on the node, branch and visit only, so the question
        its dead owner recorded (and maybe somebody answered) is found again.
        """
        visit = self.state.visits.get(node.name, 0)
        iid = f"{self.engine.run_id}-{node.name}-{f.branch}-v{visit}-{index}"
        now = utcnow()
        expires = None if node.expires_in is None else now + timedelta(seconds=node.expires_in)
        schema = self._schema(node.output)
        record = Interaction(
            iid, self.engine.run_id, node.name, "human", (question,), now, branch_id=f.branch,
            expires_at=expires, accepts=None if schema is None else lifecycle.accepts_of(schema),
        )  # fmt: skip
        try:
            await self.store.add_interaction(record, owner=self.engine.owner)
        except LeaseLostError:  # (a ConflictError too) the run is no longer ours: stop
            raise
        except ConflictError:
            existing = await self.store.get_interaction(iid)
            if (existing.node_id, existing.kind) != (node.name, "human"):
                raise
            await replay.answer_pinned(self.store, existing)  # its owner died before it could
            return iid
        data: dict[str, Any] = {"interaction_id": iid, "kind": "human", "question": question,
                                "async": False}  # fmt: skip
        if expires is not None:
            data["expires_at"] = expires.isoformat()
        await self.engine.event_for(node.name, f.branch)("human_input_requested", data)
        await replay.answer_pinned(self.store, record)
        return iid

    async def _human_answered(self, node: m.HumanNode, f: Frontier, ids: list[str]) -> Any:
        records = [await self.store.get_interaction(i) for i in ids]
        pending = [r.id for r in records if r.pending]
        if pending:
            f.resume = {"interactions": ids}
            raise PauseRun(pending[0], {"interactions": ids})
        f.resume = None
        ended = [r for r in records if r.ended is not None]
        if ended and node.on_expire.action == "fail":
            what = "; ".join(f"{r.id} {r.ended}" for r in ended)
            raise NodeError(node.name, f"the question expired unanswered ({what})")
        default = node.on_expire.answer
        answers = [default if r.ended is not None else r.answers for r in records]
        by = ["default" if r.ended is not None else r.answered_by for r in records]
        recorded: dict[str, Any] = {"interactions": ids, "answers": answers, "by": by}
        if ended:
            recorded["defaulted"] = [r.id for r in ended]
        await self.engine.event_for(node.name, f.branch)("human_answers_recorded", recorded)
        if len(answers) > 1:
            return {"text": answer_text(answers[0]), "answers": answers}
        return self._human_output(node, answers[0])

    def _human_output(self, node: m.HumanNode, answer: Any) -> Any:
        schema = self._schema(node.output)
        if isinstance(answer, dict):
            output = answer
        elif schema is not None and len(schema.fields) == 1:
            output = {next(iter(schema.fields)): answer}
        else:
            output = {"text": answer_text(answer)}
        return self.checked(node, output, node.output)

    # -- tools -------------------------------------------------------------
    async def _tool(self, node: m.ToolNode, f: Frontier, scope: Scope) -> Any:
        emit = self.engine.event_for(node.name, f.branch)
        if node.script is None:
            command = node.command.render(
                lambda path: shell_word(scope.lookup(path)), os.environ, raw=scope.lookup
            )
            await emit("tool_called", {"command": command})
            return await self._execute(node, f, command)
        literal = _LITERALS[m.SCRIPT_LANGUAGES[node.language]]
        text = node.script.render(
            lambda path: literal(scope.lookup(path)),
            os.environ,
            raw=lambda path: _raw_value(scope.lookup(path)),
        )
        program = _interpreter(node)
        with tempfile.TemporaryDirectory(prefix="iterion-script-") as folder:
            path = Path(folder) / f"{node.name}.{node.language}"
            path.write_text(text, encoding="utf-8")
            command = f"{shlex.quote(program)} {shlex.quote(str(path))}"
            await emit("tool_called", {"command": f"{program} <script>", "language": node.language,
                                       "script": text})  # fmt: skip
            return await self._execute(node, f, command)

    async def _execute(self, node: m.ToolNode, f: Frontier, command: str) -> Any:
        """Run a tool's shell line: its input on stdin, its output from stdout."""
        emit = self.engine.event_for(node.name, f.branch)
        try:
            code, out, err = await _run_shell(
                command, json.dumps(f.input), self.engine.workdir, node.timeout_seconds
            )
        except TimeoutError:
            message = f"command timed out after {node.timeout_seconds:g}s: {command}"
            await emit("tool_error", {"command": command, "error": message})
            raise NodeError(node.name, message) from None
        if code != 0:
            tail = err[-STDERR_TAIL:].strip() or "(no stderr)"
            await emit("tool_error", {"command": command, "exit_code": code, "stderr": tail})
            raise NodeError(node.name, f"command exited with {code}: {tail}")
        if node.output is None:
            return {"stdout": out, "stderr": err, "exit_code": code}
        try:
            parsed = json.loads(out)
        except json.JSONDecodeError:
            raise NodeError(
                node.name, f"output schema '{node.output}' needs JSON on stdout, got: {out[:200]!r}"
            ) from None
        return self.checked(node, parsed, node.output)

    # -- compute -----------------------------------------------------------
    def _compute(self, node: m.ComputeNode, f: Frontier, scope: Scope) -> Any:
        names = scope.namespaces()
        bare = f.input if isinstance(f.input, dict) else {}
        output: dict[str, Any] = {}
        for item in node.exprs:
            try:
                output[item.field] = evaluate(item.expr, names, bare)
            except ExpressionError as err:
                raise NodeError(node.name, f"'{item.field}': {err}") from None
        return self.checked(node, output, node.output)

    # -- events ------------------------------------------------------------
    async def _emit(self, node: m.EmitNode, scope: Scope) -> Any:
        payload = {key: scope.value(t) for key, t in node.payload}
        self.engine.fire(node.event, payload)
        return payload

    async def _wait(self, node: m.WaitNode, f: Frontier) -> Any:
        if node.event not in self.state.fired:
            async with self.engine.parked(f):
                fired = await self.engine.wait_for_event(node.event, node.timeout_seconds)
            if not fired:
                raise NodeError(
                    node.name,
                    f"timed out after {node.timeout_seconds:g}s waiting for event '{node.event}'",
                )
        return self.checked(node, self.state.fired[node.event], node.output)

    # -- await_answers -----------------------------------------------------
    async def _await_answers(self, node: m.AwaitAnswersNode, f: Frontier) -> Any:
        resumed = f.resume or {}
        pending = await self._unanswered(node)
        if pending:
            deadline = await self._deadline(node, f)
            # Parked for the whole wait: re-checking needs no slot, so a ring
            # that does not release this gate costs its siblings nothing.
            async with self.engine.parked(f):
                await self._until_answered(node, f, deadline)
        f.resume = None  # this visit is over: the next one waits its own timeout
        paused = resumed.get("await")
        if isinstance(paused, str):  # the pause that gave the worker back is over
            with contextlib.suppress(ConflictError):
                await self.store.answer(paused, {"answered": True}, answered_by="iterion")
        return {"answers": await self._answers(node)}

    async def _deadline(self, node: m.AwaitAnswersNode, f: Frontier) -> float:
        """The gate's wall-clock deadline for this visit: its ``timeout`` from when it first waited.

        The first wait records that moment in the frontier's ``resume`` and
        commits the checkpoint before waiting (one commit per visit), so the
        timeout counts from then across pauses, failures, kills and whichever
        process resumes the run — with the ``timeout`` of the workflow that runs
        now (a resume on an edited file that raised it waits the longer time).
        A new visit (a loop coming back) has a new frontier: a new deadline.
        """
        resume = f.resume or {}
        since = resume.get("waited_at")
        if isinstance(since, int | float):
            return float(since) + node.timeout_seconds
        recorded = resume.get("deadline")  # recorded by an earlier version: as it was
        if isinstance(recorded, int | float):
            return float(recorded)
        now = time.time()
        f.resume = {**resume, "waited_at": now, "deadline": now + node.timeout_seconds}
        await self.engine.commit_checkpoint()
        return now + node.timeout_seconds

    async def _unanswered(self, node: m.AwaitAnswersNode) -> list[Interaction]:
        return await self.store.pending_interactions(
            self.engine.run_id, node_id=node.from_node, kind="async"
        )

    async def _until_answered(self, node: m.AwaitAnswersNode, f: Frontier, deadline: float) -> None:
        """Level-triggered wait: armed on the doorbell before every check.

        An engine that does not keep paused runs (a cluster worker's) gives the
        run back instead of waiting once this is the run's only branch left:
        see :meth:`_pause_gate`.
        """
        bell = self.store.doorbell  # type: ignore[attr-defined]
        run = self.engine.run_id
        # woken by answers to the questions it waits for, not by every answer of the run
        key = node_key(run, node.from_node) if node.from_node else run
        while True:
            self.engine.branch_ended.clear()  # before looking: no ending is missed
            with bell.arm(key) as ticket:  # armed first: no ring is lost
                pending = await self._unanswered(node)
                if not pending:
                    return
                remaining = deadline - time.time()
                if remaining <= 0:
                    names = "; ".join(f"{p.id} ({p.node_id}): {p.question!r}" for p in pending)
                    raise NodeError(
                        node.name,
                        f"timed out after {node.timeout_seconds:g}s; unanswered: {names}",
                    )
                if not self.engine.park and self.engine.alone():
                    await self._pause_gate(node, f, pending, deadline)
                await _first_of(
                    ticket.wait(timeout=min(self.engine.poll_interval, remaining)),
                    self.engine.branch_ended.wait(),
                )

    async def _pause_gate(
        self, node: m.AwaitAnswersNode, f: Frontier, pending: list[Interaction], deadline: float
    ) -> None:
        """Pause the run at this gate: nothing else works, so no process need hold it.

        An ``await`` record lists the questions; it ends at the gate's deadline,
        which releases the run too (the gate then times out). Raises PauseRun.
        """
        visit = self.state.visits.get(node.name, 0)
        iid = f"{self.engine.run_id}-{node.name}-{f.branch}-v{visit}-await"
        record = Interaction(
            iid, self.engine.run_id, node.name, "await",
            (f"waiting for the answers to {len(pending)} question(s)",), utcnow(),
            branch_id=f.branch, waits_on=tuple(p.id for p in pending),
            expires_at=datetime.fromtimestamp(deadline, UTC),
        )  # fmt: skip
        record = await self._post_pause(record)
        since = (f.resume or {}).get("waited_at")
        state = {"deadline": deadline, "waited_at": since, "await": record.id,
                 "interactions": [record.id]}  # fmt: skip
        f.resume = state
        raise PauseRun(record.id, state)

    async def _post_pause(self, record: Interaction) -> Interaction:
        """Post the gate's ``await`` record; paused here before, that same record.

        One that ended at another deadline (the run resumed on a workflow whose
        ``timeout`` changed) is not this pause: it gets one of its own.
        """
        ends = int(record.expires_at.timestamp()) if record.expires_at is not None else 0
        for candidate in (record, replace(record, id=f"{record.id}-{ends}")):
            try:
                await self.store.add_interaction(candidate, owner=self.engine.owner)
                return candidate
            except LeaseLostError:  # (a ConflictError too) the run is no longer ours: stop
                raise
            except ConflictError:
                before = await self.store.get_interaction(candidate.id)
                if before.pending or before.expires_at == candidate.expires_at:
                    return before  # paused here before: the same pause
        return candidate

    async def _answers(self, node: m.AwaitAnswersNode) -> list[dict[str, Any]]:
        records = await self.store.interactions(self.engine.run_id)
        return [
            {"interaction_id": r.id, "node": r.node_id, "question": r.question,
             "answer": r.answers}
            for r in records
            if r.kind == "async" and not r.pending
            and (node.from_node is None or r.node_id == node.from_node)
        ]  # fmt: skip


async def _first_of(*waits: Any) -> None:
    """Until the first of ``waits`` (awaitables) is done; the others are cancelled."""
    tasks = [asyncio.ensure_future(w) for w in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()


def shell_word(value: Any) -> str:
    """A value in a tool's command line, quoted for the shell (as upstream).

    A list of plain values is one quoted word per item; other values one word
    (text as it is, the rest as JSON). ``{{!ref}}`` is not quoted at all.
    """
    if isinstance(value, list) and not any(isinstance(v, dict | list) for v in value):
        return " ".join(shlex.quote(v if isinstance(v, str) else json.dumps(v)) for v in value)
    return shlex.quote(value if isinstance(value, str) else json.dumps(value, ensure_ascii=False))


def _python_literal(value: Any) -> str:
    """A value as Python source: ``repr`` of JSON data is a Python literal (True, None, …)."""
    return repr(value)


def _json_literal(value: Any) -> str:
    """A value as JavaScript source: JSON is a JavaScript literal."""
    return json.dumps(value, ensure_ascii=False)


#: How ``{{ref}}`` appears in a script, by interpreter: a literal of its language (in a
#: shell script, one quoted word, as in a command: never something the shell expands).
_LITERALS: dict[str, Callable[[Any], str]] = {
    "sh": shell_word, "bash": shell_word, "node": _json_literal, "python3": _python_literal,
}  # fmt: skip


def _raw_value(value: Any) -> str:
    """``{{!ref}}`` in a script: text as it is, anything else as JSON (null included)."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _interpreter(node: m.ToolNode) -> str:
    """The program that runs the node's script; a clear failure when it is missing."""
    name = m.SCRIPT_LANGUAGES[node.language]
    found = shutil.which(name)
    if found is None and name == "python3":
        return sys.executable  # no python3 on PATH: the Python running this run
    if found is None:
        raise NodeError(
            node.name, f"a '{node.language}' script needs '{name}' on PATH, and there is none"
        )
    return found


def _object_or_text(text: str) -> Any:
    """A schema-less agent's final answer: the JSON object it wrote, else ``{"text": ...}``.

    (Wrapping a JSON object as text would encode it twice.)
    """
    stripped = text.strip()
    if stripped.startswith("{"):
        try:
            parsed = json.loads(stripped)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            return parsed
    return {"text": text}


#: Waits for one line on stdin, then becomes ``/bin/sh -c COMMAND`` (same pid,
#: same group, the rest of stdin untouched): the command does nothing before the
#: reaper watches its group, and nothing at all if this process dies first.
_GATED_SHELL = 'read -r _ && exec /bin/sh -c "$1"'


async def _run_shell(
    command: str, stdin: str, cwd: Path, timeout: float | None
) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        "/bin/sh", "-c", _GATED_SHELL, "sh", command,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=cwd,
        start_new_session=True,
    )  # fmt: skip
    reaper.watch(proc.pid)  # killed with this process, should it die first
    try:
        gated = "\n" + stdin  # the line that lets the command start, once watched
        out, err = await asyncio.wait_for(proc.communicate(gated.encode()), timeout)
    except (TimeoutError, asyncio.CancelledError):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
        raise
    finally:
        reaper.unwatch(proc.pid)
    return proc.returncode or 0, out.decode(errors="replace"), err.decode(errors="replace")


def _effort(node: m.Node) -> str | None:
    """The node's ``reasoning_effort`` with its ``${ENV}`` read (unset or empty: none).

    An unset variable is no effort, not a failure (the model's own default): a node
    that would fail for it may come after costly ones.

    Raises:
        NodeError: The environment gives something that is not a level.
    """
    effort = getattr(node, "reasoning_effort", None)
    if effort is None:
        return None
    try:
        value = expand_env(effort).strip()
    except VarsError:
        return None
    if value and value not in m.REASONING_EFFORTS:
        raise NodeError(
            node.name,
            f"reasoning_effort '{value}' (from {effort}) is not one of"
            f" {', '.join(m.REASONING_EFFORTS)}",
        )
    return value or None
