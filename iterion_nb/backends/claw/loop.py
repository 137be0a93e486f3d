"""The in-process tool-use loop (``backend: claw``).

One node call is a conversation: the model answers, the loop runs the tools
it called, drains the node's inbox (answers to its async questions and other
queued messages) into the next user turn, and repeats until the model gives
a final answer with no tool call. Before accepting that answer the inbox is
drained once more: a late answer buys one more turn instead of being lost.

The loop is armed on the store's doorbell for its run: at a turn boundary it
asks the store for messages only when the bell rang since the last look (an
answer or message committed anywhere rings it, pushed across processes by
the store holder), besides the first look, the look before a final answer,
and one every ``INBOX_POLL`` seconds as a fallback.
The final answer must match the node's output schema; one repair turn
carries the problems, then the node fails resumably.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from iterion_nb.backends.claw import interaction as it_tools
from iterion_nb.backends.mcp import McpConnections, McpTool
from iterion_nb.backends.memory import MemoryScope, memory_root
from iterion_nb.backends.providers.base import (
    Block,
    Message,
    Provider,
    ProviderRequest,
    ProviderResponse,
    ToolSpec,
    TransientProviderError,
    repair_prompt,
)
from iterion_nb.backends.reask import STATE_KEY, Reasks
from iterion_nb.backends.tools import Tool, ToolContext, ToolError, resolve_tools
from iterion_nb.errors import (
    AlreadyAnsweredError,
    ConflictError,
    LeaseLostError,
    NodeError,
    NotFoundError,
    PauseRun,
    QuestionClosedError,
)
from iterion_nb.ir import model as m
from iterion_nb.runtime import replay
from iterion_nb.runtime.doorbell import Ticket, node_key
from iterion_nb.runtime.ports import BackendRequest, BackendResult, NodeContext
from iterion_nb.runtime.records import (
    Interaction,
    InteractionKind,
    Option,
    answer_text,
    utcnow,
)
from iterion_nb.runtime.values import check_record

_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.S)
#: Seconds after which a turn boundary drains the inbox even if the bell never rang.
INBOX_POLL = 5.0


def _text(text: str) -> Block:
    return {"type": "text", "text": text}


def _result(tool_use_id: str, content: str, error: bool = False) -> Block:
    return {"type": "tool_result", "tool_use_id": tool_use_id, "content": content,
            "is_error": error}  # fmt: skip


def parse_json_answer(text: str) -> Any:
    """The JSON object in a final answer (code fences and chatter around it allowed)."""
    stripped = text.strip()
    fenced = _FENCE.match(stripped)
    if fenced:
        stripped = fenced.group(1)
    try:
        return json.loads(stripped)
    except json.JSONDecodeError:
        start, end = stripped.find("{"), stripped.rfind("}")
        if 0 <= start < end:
            return json.loads(stripped[start : end + 1])
        raise


def output_instructions(schema: m.Schema) -> str:
    """How the system prompt describes the expected final answer."""
    fields = []
    for field in schema.fields.values():
        line = f"- {field.name}: {field.type}"
        if field.enum:
            line += f" (one of: {', '.join(field.enum)})"
        fields.append(line)
    return (
        "## Final answer\nWhen you are done, reply with only a JSON object with these"
        " fields (no tool call in that reply):\n" + "\n".join(fields)
    )


async def reported_turn(
    ctx: NodeContext,
    request: ProviderRequest,
    complete: Callable[[ProviderRequest], Awaitable[ProviderResponse]],
    turn: int = 0,
    sent: int = 0,
) -> ProviderResponse:
    """One model turn with its ``llm_request`` / ``llm_step_finished`` events and its cost.

    ``turn`` counts the model's replies before this one (the caller keeps the
    count: recounting a long conversation at every turn is quadratic).
    ``llm_request`` records what is new for the model at this turn — the
    messages from index ``sent`` on (and the system prompt at the first turn)
    — so the events hold the whole conversation, each message once;
    ``llm_step_finished`` records the reply: its text and its tool calls.
    """
    data: dict[str, Any] = {"model": request.model, "turn": turn,
                            "messages": request.messages[sent:]}  # fmt: skip
    if turn == 0:
        data["system"] = request.system
    if request.reasoning_effort is not None:
        data["reasoning_effort"] = request.reasoning_effort
    await ctx.emit("llm_request", data)
    response = await complete(request)
    ctx.charge(response.tokens_in + response.tokens_out, response.cost_usd)
    calls = response.tool_calls
    await ctx.emit(
        "llm_step_finished",
        {"tokens_in": response.tokens_in, "tokens_out": response.tokens_out,
         "cost_usd": response.cost_usd, "stop_reason": response.stop_reason,
         "tool_calls": [c["name"] for c in calls], "text": response.text,
         "calls": [{"id": c.get("id"), "name": c["name"], "input": c.get("input")}
                   for c in calls]},
    )  # fmt: skip
    return response


def policy_refusal(policy: tuple[str, ...] | None, name: str) -> str | None:
    """What the model is told when ``tool_policy`` refuses the tool ``name`` (None: allowed)."""
    if m.tool_allowed(policy, name):
        return None
    allowed = ", ".join(policy or ()) or "no tool"
    return f"tool '{name}' is not allowed by tool_policy (it allows: {allowed}); it was not run"


def inherited_session(request: BackendRequest, backend: str) -> dict[str, Any] | None:
    """The conversation a node continues or forks, which must be ``backend``'s; or None.

    Raises:
        NodeError: Another backend holds it.
    """
    session = request.session
    if session is not None and session.get("backend") != backend:
        raise NodeError(
            request.node.name,
            f"session: {getattr(request.node, 'session', 'inherit')} continues a conversation"
            f" held by the {session.get('backend')} backend; this node runs on {backend}"
            " (give both nodes the same backend)",
        )
    return session


class AgentLoop:
    """Runs one agent or judge node call to its final answer (or a pause)."""

    def __init__(self, request: BackendRequest, provider: Provider, *, retries: int,
                 retry_delay: float) -> None:  # fmt: skip
        node = request.node
        assert isinstance(node, m.AgentNode)
        assert request.context is not None
        self.request = request
        self.node = node
        self.ctx: NodeContext = request.context
        self.provider = provider
        self.retries = retries
        self.retry_delay = retry_delay
        try:
            self.tools: dict[str, Tool | McpTool] = dict(resolve_tools(node.tools, node.readonly))
        except KeyError as err:
            raise NodeError(node.name, str(err.args[0])) from None
        self.memory = (
            MemoryScope(memory_root(request.workdir, node.memory.scope)) if node.memory else None
        )
        if self.memory is not None and node.memory is not None:
            self.tools.update(self.memory.tools(node.memory, node.readonly))
        #: The notes' index and autoloaded files, read once, when the call starts.
        self._remembered: str | None = None
        self.interaction_specs = it_tools.tools_for(node.interaction)
        self._specs = [t.spec for t in self.tools.values()] + self.interaction_specs
        self.tool_context = ToolContext(Path(request.workdir), node.readonly)
        self._ticket: Ticket | None = None
        self._looked = 0.0
        #: Questions whose answer a tool result already carried (not delivered again).
        self._answered_inline: set[str] = set()
        self._replies = 0  # the model's replies so far in this conversation
        self._sent = 0  # messages already recorded in an llm_request event
        #: When questions this node posted expire (the inbox looks then, to say so).
        self._expiries: list[float] = []
        #: Model replies of a conversation this node continues (not its own turns).
        self._turn_base = 0
        #: The questions an earlier run of this node posted, which its asks may reuse
        #: (looked for only when this execution may be a re-run: ``request.rerun``).
        self.reasks = Reasks(self.ctx, request.resume, rerun=request.rerun)

    # -- the conversation ----------------------------------------------------
    def system_prompt(self) -> str:
        """The node's system prompt, plus the async protocol and the output format."""
        parts = [self.request.system] if self.request.system else []
        if self.memory is not None and self.node.memory is not None:
            if self._remembered is None:  # once: a note written meanwhile is read by a tool
                self._remembered = self.memory.prompt(self.node.memory)
            if self._remembered:
                parts.append(self._remembered)
        if self.node.interaction == "async":
            parts.append(it_tools.PROTOCOL)
        if self.request.output_schema is not None:
            parts.append(output_instructions(self.request.output_schema))
        return "\n\n".join(parts)

    @property
    def specs(self) -> list[ToolSpec]:
        """Every tool the model may call."""
        return self._specs

    async def run(self) -> BackendResult:
        """Turn after turn until a final answer that fits (or a pause, or a failure)."""
        servers = self.request.mcp_servers
        connections = McpConnections(self.node.name, servers, self.request.workdir, self.node.tools)
        async with connections as mcp:
            self.tools.update(mcp.tools)  # the MCP servers' tools, while they are connected
            self._specs = self._specs + [t.spec for t in mcp.tools.values()]
            bell = getattr(self.ctx.store, "doorbell", None)
            if bell is None:
                return await self._converse()
            with bell.arm(node_key(self.ctx.run_id, self.ctx.node_id)) as ticket:
                self._ticket = ticket
                try:
                    return await self._converse()
                finally:
                    self._ticket = None

    async def _converse(self) -> BackendResult:
        messages = await self._start()
        # once, not per turn; a continued session's earlier replies are not this node's turns
        self._replies = sum(m["role"] == "assistant" for m in messages) - self._turn_base
        # a resumed conversation: what came before was recorded by the run that paused
        self._sent = len(messages) - 1 if self.request.resume else 0
        steps = 0
        repaired = False
        while True:
            response = await self._turn(messages)
            messages.append({"role": "assistant", "content": response.content})
            calls = response.tool_calls
            if calls:
                steps += 1
                limit = self.node.tool_max_steps
                if limit is not None and steps > limit:
                    raise NodeError(self.node.name, f"used more than tool_max_steps ({limit})")
                results = await self._run_calls(calls, messages)
                inbox = await self._inbox(only_if_rung=True)
                messages.append({"role": "user", "content": results + inbox})
                continue
            late = await self._inbox()
            if late:  # a late answer buys one more turn
                messages.append({"role": "user", "content": late})
                continue
            output, problems = self._final(response.text)
            if not problems:
                return BackendResult(output, session={"backend": "claw", "messages": messages})
            if repaired:
                raise NodeError(
                    self.node.name,
                    f"final answer does not match schema '{self.node.output}':"
                    f" {'; '.join(problems)}",
                )
            repaired = True
            messages.append({"role": "user", "content": [_text(repair_prompt(problems))]})

    async def _start(self) -> list[Message]:
        state = self.request.resume
        if not state:
            inherited = self._inherited()
            self._turn_base = sum(m["role"] == "assistant" for m in inherited)
            first = list(self.request.user_blocks) or [_text(self.request.user or "Begin.")]
            return [*inherited, {"role": "user", "content": first}]
        self._turn_base = int(state.get("turn_base", 0))
        messages: list[Message] = list(state["messages"])
        results: list[Block] = list(state["results"])
        skip: set[str] = set()
        if state["kind"] == "ask_user":
            record = await self.ctx.store.get_interaction(state["interaction"])
            if record.pending:
                raise PauseRun(record.id, state)
            results.append(_result(state["tool_use_id"], it_tools.blocking_result(record)))
        else:
            records = [await self.ctx.store.get_interaction(i) for i in state["waits_on"]]
            pending = [r.id for r in records if r.pending]
            if pending:
                raise PauseRun(state["interaction"], state)
            results.append(_result(state["tool_use_id"], it_tools.answers_text(records)))
            skip = {r.id for r in records}
            try:
                summary = {"answers": [r.answers for r in records]}
                await self.ctx.store.answer(state["interaction"], summary, answered_by="iterion")
            except AlreadyAnsweredError:
                pass
        await self._watch_expiries()
        messages.append({"role": "user", "content": results + await self._inbox(skip)})
        return messages

    def _inherited(self) -> list[Message]:
        """The conversation this node continues or forks (``session:``), or none."""
        session = inherited_session(self.request, "claw")
        return [] if session is None else list(session["messages"])

    async def _watch_expiries(self) -> None:
        """After a pause or a crash: when this node's open questions expire."""
        mine = await self.ctx.store.pending_interactions(
            self.ctx.run_id, node_id=self.node.name, kind="async"
        )
        self._expiries = [self._expiry(q) for q in mine if q.expires_at is not None]

    @staticmethod
    def _expiry(question: Interaction) -> float:
        assert question.expires_at is not None
        return time.monotonic() + (question.expires_at - utcnow()).total_seconds()

    async def _turn(self, messages: list[Message]) -> ProviderResponse:
        request = ProviderRequest(
            model=self.request.model or "scripted",
            system=self.system_prompt(),
            messages=messages,
            tools=self.specs,
            node=self.node.name,
            visit=self.request.visit,
            max_tokens=self.node.max_tokens or 4096,
            turn_base=self._turn_base,
            reasoning_effort=self.request.reasoning_effort,
        )
        turn, self._replies = self._replies, self._replies + 1
        sent, self._sent = self._sent, len(messages)
        return await reported_turn(self.ctx, request, self._complete, turn, sent)

    async def _complete(self, request: ProviderRequest) -> ProviderResponse:
        attempt = 0
        while True:
            try:
                return await self.provider.complete(request)
            except TransientProviderError as err:
                attempt += 1
                if attempt > self.retries:
                    raise NodeError(
                        self.node.name, f"provider kept failing after {self.retries} retries: {err}"
                    ) from err
                await asyncio.sleep(self.retry_delay * 2 ** (attempt - 1))

    def _final(self, text: str) -> tuple[Any, list[str]]:
        schema = self.request.output_schema
        if schema is None:
            return text, []
        try:
            output = parse_json_answer(text)
        except (json.JSONDecodeError, ValueError):
            return None, ["it is not a JSON object"]
        return output, check_record(output, schema)

    # -- inbox -------------------------------------------------------------
    async def _inbox(self, skip: set[str] | None = None, only_if_rung: bool = False) -> list[Block]:
        """The node's queued messages as text blocks (each delivered once).

        ``only_if_rung``: skip the store unless the doorbell rang since the
        last look (or the fallback interval passed).
        """
        ticket = self._ticket
        now = time.monotonic()
        expired = [t for t in self._expiries if t <= now]
        if ticket is not None:
            rung = ticket.consume()
            if only_if_rung and not rung and not expired and now - self._looked < INBOX_POLL:
                return []
        self._looked = now
        if expired:  # its own questions expiring: recorded now, told below
            self._expiries = [t for t in self._expiries if t > now]
            await self.ctx.store.expire_due(self.ctx.run_id)
        messages = await self.ctx.store.drain_messages(self.ctx.run_id, self.ctx.node_id)
        blocks = []
        known = (skip or set()) | self._answered_inline
        for message in messages:
            if known and any(message.text.startswith(f"[Answer to question {i}]") for i in known):
                continue  # already in a tool result (await_answers, a repeated question)
            blocks.append(_text(message.text))
        if blocks:
            await self.ctx.emit("inbox_delivered", {"messages": len(blocks)})
        return blocks

    # -- tools -------------------------------------------------------------
    async def _run_calls(self, calls: list[Block], messages: list[Message]) -> list[Block]:
        results: list[Block] = []
        blocking: Block | None = None
        for call in calls:
            if call["name"] in ("ask_user", "await_answers") and self._granted(call["name"]):
                if blocking is None:
                    blocking = call
                    continue
                results.append(_result(call["id"], "only one blocking call per turn", True))
                continue
            results.append(await self._run_call(call))
        if blocking is not None:
            results.append(await self._block(blocking, messages, results))
        return results

    def input_problem(self, name: str, arguments: Any) -> str | None:
        """What is wrong with the arguments of a call of ``name``, in our words (None: fine)."""
        spec = next((s for s in self.interaction_specs if s.name == name), None)
        if spec is not None:
            try:
                it_tools.check_input(spec, arguments)
            except ValueError as err:
                return str(err)
            return None
        tool = self.tools.get(name)
        return None if tool is None else tool.input_problem(arguments)

    def _granted(self, name: str) -> bool:
        return any(spec.name == name for spec in self.interaction_specs)

    async def _run_call(self, call: Block) -> Block:
        name, args = call["name"], call.get("input") or {}
        if name == "ask_user_async" and self._granted(name):
            return await self._ask_async(call)
        if name in ("retract_question", "amend_question") and self._granted(name):
            return await self._change_question(call)
        await self.ctx.emit("tool_called", {"tool": name, "input": args})
        tool = self.tools.get(name)
        denied = self.denied(tool) if tool is not None else None
        if denied is not None:  # not run: the model is told why, the log records it
            await self.ctx.emit(
                "tool_error", {"tool": name, "error": denied, "denied_by": "tool_policy"}
            )
            return _result(call["id"], denied, True)
        try:
            if tool is None:
                available = ", ".join([*self.tools, *(s.name for s in self.interaction_specs)])
                raise ToolError(f"unknown tool '{name}' (available: {available or 'none'})")
            result = await tool.run(args, self.tool_context)
            await self.ctx.emit("tool_result", {"tool": name, "id": call["id"], "result": result})
            return _result(call["id"], result)
        except ToolError as err:
            message = str(err)
        except Exception as err:
            message = f"{name} failed: {err}"
        await self.ctx.emit("tool_error", {"tool": name, "error": message})
        return _result(call["id"], message, True)

    def denied(self, tool: Tool | McpTool) -> str | None:
        """Why the node's ``tool_policy`` refuses ``tool`` (None: it may run).

        The policy names tools as ``tools:`` does: an MCP server's as
        ``mcp.SERVER.TOOL``, the others by their name.
        """
        name = f"{m.MCP_TOOL_PREFIX}{tool.server}.{tool.tool_name}" if isinstance(
            tool, McpTool) else tool.name  # fmt: skip
        return policy_refusal(self.node.tool_policy, name)

    def _interaction_id(self, call: Block) -> str:
        return f"{self.ctx.run_id}-{call['id']}"

    def asked_id(self, call: Block) -> str:
        """The id of the question the call ``call`` asked (reused or its own)."""
        return self.reasks.id_for(str(call["id"])) or self._interaction_id(call)

    async def question(self, call: Block, kind: InteractionKind) -> Interaction:
        """The question a call of ``ask_user`` or ``ask_user_async`` asks, to post.

        Its id is the call's, unless a run of this node before this one (that
        failed, or whose process died) asked the same question in the same
        visit: then it is that question's, and posting it reuses that record
        (see :mod:`iterion_nb.backends.reask`).

        Raises:
            ValueError: The call's input is not a question (the message says why).
        """
        record = it_tools.new_question(
            self._interaction_id(call), self.ctx.run_id, self.node.name, self.ctx.branch_id,
            kind, call.get("input") or {},
        )  # fmt: skip
        return await self.reasks.resolve(record, str(call["id"]))

    async def _ask_async(self, call: Block) -> Block:
        try:
            record = await self.question(call, "async")
        except ValueError as err:
            await self.ctx.emit("tool_error", {"tool": call["name"], "error": str(err)})
            return _result(call["id"], str(err), True)
        record = await self._post(record)
        if record.expires_at is not None and record.pending:
            self._expiries.append(self._expiry(record))
        if record.ended is not None:
            self._answered_inline.add(record.id)
            return _result(call["id"], it_tools.EXPIRED.format(id=record.id))
        if not record.pending:
            # asked again by a node re-run after a crash, and answered meanwhile (maybe
            # delivered to the dead run): the answer comes with the call, not twice
            self._answered_inline.add(record.id)
            answer = answer_text(record.answers)
            return _result(call["id"], it_tools.ANSWERED.format(id=record.id, answer=answer))
        return _result(call["id"], it_tools.POSTED.format(id=record.id))

    async def _change_question(self, call: Block) -> Block:
        """``retract_question`` / ``amend_question``: only on this node's own open questions."""
        name = call["name"]
        spec = it_tools.RETRACT_QUESTION if name == "retract_question" else it_tools.AMEND_QUESTION
        try:
            args = it_tools.check_input(spec, call.get("input"))
            text = await (self._retract(args) if name == "retract_question" else self._amend(args))
        except ValueError as err:
            await self.ctx.emit("tool_error", {"tool": name, "error": str(err)})
            return _result(call["id"], str(err), True)
        await self.ctx.emit("tool_result", {"tool": name, "id": call["id"], "result": text})
        return _result(call["id"], text)

    async def _own_question(self, iid: str) -> Interaction:
        """One of this node's questions, by its id (or by the id of the call that asked it)."""
        found = None
        # (a re-asked question's call id names the question it reused)
        for candidate in filter(None, (iid, self.reasks.id_for(iid), f"{self.ctx.run_id}-{iid}")):
            with contextlib.suppress(NotFoundError):
                found = await self.ctx.store.get_interaction(candidate)
                break
        if found is None or found.run_id != self.ctx.run_id or found.node_id != self.node.name:
            raise ValueError(f"no question '{iid}' asked by this agent")
        if found.kind != "async":
            raise ValueError(f"question '{iid}' was not posted with ask_user_async")
        return found

    async def _retract(self, args: dict[str, Any]) -> str:
        reason = str(args["reason"]).strip()
        if not reason:
            raise ValueError("'reason' must say why, for the person")
        before = await self._own_question(str(args["id"]))
        after = await self.ctx.store.retract(before.id, reason)
        if after.answered_at is not None:  # the answer won: it comes here, not in the inbox
            self._answered_inline.add(after.id)
        elif after.ended == "expired":
            self._answered_inline.add(after.id)  # this result says it; the notice is not repeated
        return it_tools.retracted_text(before, after)

    async def _amend(self, args: dict[str, Any]) -> str:
        question = args.get("question")
        if question is not None and not str(question).strip():
            raise ValueError("'question' must be a non-empty string")
        if question is None and "options" not in args and "allow_free_text" not in args:
            raise ValueError("give what changes: 'question', 'options' or 'allow_free_text'")
        options: tuple[Option, ...] | None = None
        if "options" in args:
            options = it_tools.options_of(args["options"])
        before = await self._own_question(str(args["id"]))
        try:
            after = await self.ctx.store.amend(
                before.id, questions=None if question is None else (str(question),),
                options=options, allow_free_text=args.get("allow_free_text"),
            )  # fmt: skip
        except AlreadyAnsweredError as err:
            self._answered_inline.add(before.id)
            return (
                f"question {before.id} was answered before it could be changed:"
                f" {answer_text(err.existing)}"
            )
        except QuestionClosedError as err:
            self._answered_inline.add(before.id)
            return f"question {before.id} can no longer be changed: it {err.ended}"
        return f"question {after.id} updated (revision {after.revision}); the person sees it now"

    async def _post(self, record: Interaction, **extra: Any) -> Interaction:
        """Record a question; a node re-run after a crash finds its own and reuses it.

        A run started with pinned answers answers it at once (``replay``): a
        blocking question then comes back answered; an async one is answered
        like a person's fast answer, read at the agent's next turn.
        """
        try:
            await self.ctx.store.add_interaction(record, owner=self.ctx.owner)
        except LeaseLostError:  # (a ConflictError too) the run is no longer ours: stop
            raise
        except ConflictError:
            existing = await self.ctx.store.get_interaction(record.id)
            if (existing.node_id, existing.kind) != (record.node_id, record.kind):
                raise
            replayed = await replay.answer_pinned(self.ctx.store, existing)
            return existing if replayed is None or record.kind == "async" else replayed
        await self._announce(record, **extra)
        replayed = await replay.answer_pinned(self.ctx.store, record)
        return record if replayed is None or record.kind == "async" else replayed

    async def close_stale_awaits(self, keep: str | None = None) -> set[str]:
        """Close this node's open ``await_answers`` pause records but ``keep``.

        A process killed after posting a pause record and before the checkpoint
        that holds the pause leaves the record open: the node re-run finds every
        answer in and does not pause, or pauses under its new call's id (a real
        model mints new ids). Only one pause of a node can be live, and this
        node is running, so the others are closed as a resume closes its own:
        answered by iterion with what they waited on (``None`` where an answer
        is still missing). Returns the ids of the questions they waited on.
        """
        store = self.ctx.store
        stale = await store.pending_interactions(
            self.ctx.run_id, node_id=self.node.name, kind="await"
        )
        waited: set[str] = set()
        for record in stale:
            if record.id == keep:
                continue
            answers = [(await store.get_interaction(i)).answers for i in record.waits_on]
            with contextlib.suppress(AlreadyAnsweredError):
                await store.answer(record.id, {"answers": answers}, answered_by="iterion")
            waited |= set(record.waits_on)
        return waited

    async def _announce(self, record: Interaction, **extra: Any) -> None:
        await self.ctx.emit(
            "human_input_requested",
            {"interaction_id": record.id, "kind": record.kind, "question": record.question,
             "options": [{"id": o.id, "label": o.label} for o in record.options],
             "async": record.kind == "async", **extra}
            | ({} if record.expires_at is None else {"expires_at": record.expires_at.isoformat()}),
        )  # fmt: skip

    async def _block(self, call: Block, messages: list[Message], results: list[Block]) -> Block:
        state: dict[str, Any] = {"tool_use_id": call["id"], "messages": messages,
                                 "turn_base": self._turn_base,
                                 "results": results}  # fmt: skip
        if call["name"] == "ask_user":
            try:
                record = await self.question(call, "ask_user")
            except ValueError as err:
                await self.ctx.emit("tool_error", {"tool": call["name"], "error": str(err)})
                return _result(call["id"], str(err), True)
            record = await self._post(record)
            if not record.pending:  # answered (or expired) before a crash made us replay it
                return _result(call["id"], it_tools.blocking_result(record))
            state |= {"kind": "ask_user", "interaction": record.id, "interactions": [record.id],
                      STATE_KEY: self.reasks.asked()}  # fmt: skip
            raise PauseRun(record.id, state)
        try:
            it_tools.check_input(it_tools.AWAIT_ANSWERS, call.get("input"))
        except ValueError as err:
            await self.ctx.emit("tool_error", {"tool": call["name"], "error": str(err)})
            return _result(call["id"], str(err), True)
        if self.request.in_branch:
            await self.ctx.emit(
                "tool_error", {"tool": "await_answers", "error": it_tools.IN_BRANCH}
            )
            return _result(call["id"], it_tools.IN_BRANCH, True)
        store, run_id = self.ctx.store, self.ctx.run_id
        pending = await store.pending_interactions(run_id, node_id=self.node.name, kind="async")
        pause_id = f"{self._interaction_id(call)}-await"
        if not pending:
            self._answered_inline |= await self.close_stale_awaits()
            mine = [i for i in await store.interactions(run_id)
                    if i.kind == "async" and i.node_id == self.node.name]  # fmt: skip
            return _result(call["id"], it_tools.answers_text(mine))
        await self.close_stale_awaits(keep=pause_id)
        note = (call.get("input") or {}).get("note") or "waiting for the answers to my questions"
        pause = Interaction(
            pause_id, run_id, self.node.name, "await", (str(note),),
            utcnow(), branch_id=self.ctx.branch_id,
            waits_on=tuple(p.id for p in pending),
        )  # fmt: skip
        pause = await self._post(pause, waits_on=list(pause.waits_on))
        state |= {"kind": "await", "interaction": pause.id, "interactions": [pause.id],
                  "waits_on": list(pause.waits_on), STATE_KEY: self.reasks.asked()}  # fmt: skip
        raise PauseRun(pause.id, state)
