"""Agent nodes through the Claude Code CLI, with the same ADR-081 semantics as the in-process loop.

How each piece maps (see docs/agents.md, "The Claude Code backend"):

- The interaction tools and the node's Python tools are served by an
  in-process MCP server named ``iterion`` (the model sees
  ``mcp__iterion__<name>``), with the in-process loop's input schemas and
  result texts; Claude Code's own tools are switched off.
- ``ask_user`` and the pausing branch of ``await_answers``: a PreToolUse hook
  records the question and answers ``defer``; the CLI ends the turn with
  ``stop_reason`` ``tool_deferred``; the node raises :class:`PauseRun` with
  the CLI's session id in its state. Resuming starts a new CLI with
  ``resume=<session id>`` and the prompt ``/cost`` — a local command that
  makes no model call — so the CLI re-runs the pending call (now answered:
  the hook allows it and the tool returns the answer) and the model goes on.
- Drains: PostToolUse adds the node's queued messages as additional context;
  Stop blocks with them (the reason is the messages) when there are any, at
  most ``max_stop_blocks`` times in a row.
- The final answer must fit the node's schema; one repair prompt (in the same
  session) carries the problems, then the node fails resumably.
- The CLI runs in a process group of its own that the reaper watches, so it
  dies with the process running the node, even under kill -9 (see reaped.py).
"""

from __future__ import annotations

import asyncio
import collections
import os
import re
import shutil
from pathlib import Path
from typing import Any

from iterion_nb.backends.claw import interaction as it_tools
from iterion_nb.backends.claw.loop import AgentLoop, inherited_session, policy_refusal
from iterion_nb.backends.mcp import cli_allowed, cli_servers
from iterion_nb.backends.providers.base import ToolSpec, image_data, repair_prompt
from iterion_nb.backends.reask import STATE_KEY
from iterion_nb.errors import LeaseLostError, NodeError, PauseRun
from iterion_nb.ir import model as m
from iterion_nb.runtime.ports import BackendRequest, BackendResult
from iterion_nb.runtime.records import Interaction, utcnow

SERVER = "iterion"
PREFIX = f"mcp__{SERVER}__"
#: The prompt of a resumed session: a local command, so no model turn is spent on it.
RESUME_PROMPT = "/cost"
#: Shows the CLI's model an image the prompt names: the CLI takes no image in its
#: prompt, so (as upstream) the node gets this tool when its prompt shows one.
READ_IMAGE = ToolSpec(
    "read_image",
    "Look at an image attached to this run: give its path as the prompt shows it.",
    {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"],
     "additionalProperties": False},
)  # fmt: skip
#: Why a session ends when a question is refused (the run is no longer this process's).
LOST = "another process took this run over: this one stops"
#: The oldest CLI known to honour ``defer`` and resume a deferred call.
MIN_CLI = (2, 1, 300)


def _bundled_cli(sdk: Any) -> str | None:
    """The CLI shipped inside the claude-agent-sdk wheel, if any."""
    bundled = Path(sdk.__file__).parent / "_bundled" / "claude"
    return str(bundled) if bundled.exists() else None


def _sdk() -> Any:
    try:
        import claude_agent_sdk
    except ImportError:
        return None
    return claude_agent_sdk


class ClaudeCodeBackend:
    """Runs agent and judge nodes with the Claude Code CLI.

    Args:
        env: Extra environment for the CLI (e.g. ``ANTHROPIC_BASE_URL``,
            ``ANTHROPIC_API_KEY``, ``HOME``); the process environment is the base.
        cli_path: The ``claude`` executable (default: the one bundled with
            ``claude-agent-sdk``, else ``claude`` on PATH).
        max_turns: Limit on model turns per CLI session.
        max_stop_blocks: How many times in a row the Stop hook may send the
            agent back to work with newly arrived messages.
    """

    reports_steps = True

    def __init__(
        self,
        *,
        env: dict[str, str] | None = None,
        cli_path: str | os.PathLike[str] | None = None,
        max_turns: int = 50,
        max_stop_blocks: int = 3,
    ) -> None:
        self.env = dict(env or {})
        self.cli_path = cli_path
        self.max_turns = max_turns
        self.max_stop_blocks = max_stop_blocks
        self._cli_checked = False

    async def call(self, request: BackendRequest) -> BackendResult:
        """Run one node call (agents and judges; other purposes are one tool-less turn)."""
        sdk = _sdk()
        if sdk is None:
            raise NodeError(
                request.node.name,
                "backend claude_code needs claude-agent-sdk: pip install 'iterion-nb[claude]'",
            )
        await self._check_cli(request.node.name, sdk)
        return await _Session(self, sdk, request).run()

    async def _check_cli(self, node: str, sdk: Any) -> None:
        """Refuse a CLI that is missing or older than :data:`MIN_CLI`, saying what to do."""
        if self._cli_checked:
            return
        path = str(self.cli_path) if self.cli_path else _bundled_cli(sdk) or shutil.which("claude")
        if path is None or not Path(path).exists():
            raise NodeError(node, "the claude CLI is missing: install claude-agent-sdk (it bundles"
                            " the CLI), or pass cli_path= to ClaudeCodeBackend")  # fmt: skip
        try:
            proc = await asyncio.create_subprocess_exec(
                path, "--version", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
            )
            out, err = await asyncio.wait_for(proc.communicate(), 30)
        except (OSError, TimeoutError) as problem:
            raise NodeError(node, f"the claude CLI at {path} does not run: {problem}") from None
        found = re.match(r"\s*(\d+)\.(\d+)\.(\d+)", out.decode(errors="replace"))
        if proc.returncode != 0 or found is None:
            detail = (err or out).decode(errors="replace").strip()[:200]
            raise NodeError(
                node, f"the claude CLI at {path} does not run: {detail or 'no version'}"
            )
        version = tuple(int(part) for part in found.groups())
        if version < MIN_CLI:
            need = ".".join(map(str, MIN_CLI))
            raise NodeError(
                node,
                f"the claude CLI at {path} is {'.'.join(map(str, version))}, older than {need}:"
                " upgrade claude-agent-sdk (or the CLI)",
            )
        self.cli_path = path
        self._cli_checked = True


class _Session:
    """One node call: one CLI session, possibly over several CLI processes (pauses, repairs)."""

    def __init__(self, backend: ClaudeCodeBackend, sdk: Any, request: BackendRequest) -> None:
        node = request.node
        if not isinstance(node, m.AgentNode):
            raise NodeError(node.name, f"backend claude_code cannot run {node.kind} nodes")
        self.backend = backend
        self.sdk = sdk
        self.request = request
        self.node = node
        # the in-process loop's helpers: prompts, posting questions, the inbox, tools
        self.loop = AgentLoop(request, provider=None, retries=0, retry_delay=0.0)  # type: ignore[arg-type]
        self.ctx = self.loop.ctx
        self.calls: dict[str, collections.deque[str]] = collections.defaultdict(collections.deque)
        self.deferred: dict[str, Any] | None = None
        #: Set when a question was refused: another process took the run over.
        self.lost: LeaseLostError | None = None
        self.stop_blocks = 0
        #: The CLI names of MCP calls tool_policy refused (recorded then, not at the turn's end).
        self.refused: list[str] = []
        self.skip: set[str] = set()
        self.cost = 0.0
        self._pending: dict[str, Any] = {}
        self.steps = int((request.resume or {}).get("steps", 0))
        self.failure: NodeError | None = None
        #: Model turns so far in this node call (continued across pauses).
        self.turns = int((request.resume or {}).get("turns", 0))
        #: Model turns of a conversation this node continues (session: inherit / fork).
        self.turn_base = int((request.resume or request.session or {}).get(
            "turn_base" if request.resume else "turns", 0))  # fmt: skip

    # -- the MCP server ------------------------------------------------------
    def _mcp_server(self) -> Any:
        tools = []
        for spec in [*self.loop.specs]:
            tools.append(self.sdk.SdkMcpTool(
                name=spec.name, description=spec.description, input_schema=spec.input_schema,
                handler=self._handler(spec.name),
            ))  # fmt: skip
        if self._images():
            tools.append(self.sdk.SdkMcpTool(
                name=READ_IMAGE.name, description=READ_IMAGE.description,
                input_schema=READ_IMAGE.input_schema, handler=self._read_image,
            ))  # fmt: skip
        return self.sdk.create_sdk_mcp_server(SERVER, tools=tools)

    def _images(self) -> dict[str, dict[str, Any]]:
        """The image attachments the prompt shows, by path."""
        return {str(b["path"]): b for b in self.request.user_blocks if b.get("type") == "image"}

    async def _read_image(self, args: dict[str, Any]) -> dict[str, Any]:
        """``read_image``: one of the prompt's images, as an image result."""
        path = str(args.get("path", ""))
        await self.ctx.emit("tool_called", {"tool": READ_IMAGE.name, "path": path})
        images = self._images()
        block = images.get(path)
        found = image_data(block) if block is not None else (
            f"read_image shows this run's image attachments: {', '.join(images)}"
        )  # fmt: skip
        if isinstance(found, str):
            await self.ctx.emit("tool_error", {"tool": READ_IMAGE.name, "error": found})
            return {"content": [{"type": "text", "text": found}], "is_error": True}
        return {"content": [{"type": "image", "data": found[1], "mimeType": found[0]}]}

    def _handler(self, name: str) -> Any:
        async def handle(args: dict[str, Any]) -> dict[str, Any]:
            ids = self.calls[name]
            call = {"id": ids.popleft() if ids else f"call-{name}", "name": name, "input": args}
            block = await self._run_tool(call)
            result: dict[str, Any] = {"content": [{"type": "text", "text": block["content"]}]}
            if block.get("is_error"):
                result["is_error"] = True
            return result

        return handle

    async def _run_tool(self, call: dict[str, Any]) -> dict[str, Any]:
        name = call["name"]
        if name == "ask_user":
            record = await self.ctx.store.get_interaction(self.loop.asked_id(call))
            if record.pending:  # the CLI ran a call it was told to defer (parallel calls)
                return {"content": "ask_user must be the only tool call of its turn; call it"
                        " again alone", "is_error": True}  # fmt: skip
            return {"content": it_tools.blocking_result(record)}
        if name == "await_answers":
            return await self._await_answers(call)
        try:
            block = await self.loop._run_call(call)
        except LeaseLostError as err:  # an async question refused: the next hook ends the session
            self.lost = err
            return {"content": LOST, "is_error": True}
        return {"content": str(block["content"]), "is_error": bool(block.get("is_error"))}

    async def _await_answers(self, call: dict[str, Any]) -> dict[str, Any]:
        try:
            it_tools.check_input(it_tools.AWAIT_ANSWERS, call.get("input"))
        except ValueError as err:
            await self.ctx.emit("tool_error", {"tool": "await_answers", "error": str(err)})
            return {"content": str(err), "is_error": True}
        if self.request.in_branch:
            await self.ctx.emit(
                "tool_error", {"tool": "await_answers", "error": it_tools.IN_BRANCH}
            )
            return {"content": it_tools.IN_BRANCH, "is_error": True}
        store, run_id = self.ctx.store, self.ctx.run_id
        mine = [i for i in await store.interactions(run_id)
                if i.kind == "async" and i.node_id == self.node.name]  # fmt: skip
        if any(i.pending for i in mine):
            missing = "some answers are still missing; call await_answers alone"
            return {"content": missing, "is_error": True}
        # this call's pause record, answered while it was parked, or one a killed run left open
        self.skip |= await self.loop.close_stale_awaits()
        return {"content": it_tools.answers_text(mine)}

    # -- hooks -----------------------------------------------------------------
    async def _pre_tool(self, data: dict[str, Any], tool_use_id: str | None, _: Any) -> Any:
        await self._flush(self._pending)  # the model's turn is complete once it calls tools
        if self.failure is not None:  # over tool_max_steps: run nothing more, end the session
            return self._end_session(str(self.failure))
        name = str(data.get("tool_name", "")).removeprefix(PREFIX)
        call_id = str(data.get("tool_use_id") or tool_use_id or "")
        call = {"id": call_id, "name": name, "input": data.get("tool_input") or {}}
        self.calls[name].append(call_id)
        try:
            if name == "ask_user" and self.loop._granted(name):
                return await self._pre_ask_user(call)
            if name == "await_answers" and self.loop._granted(name) and not self.request.in_branch:
                return await self._pre_await(call)
        except LeaseLostError as err:
            self.lost = err
        if self.lost is not None:  # another process took the run over: end the session
            return self._end_session(LOST)
        return {}

    async def _policy_gate(self, data: dict[str, Any], tool_use_id: str | None, _: Any) -> Any:
        """``tool_policy`` for the tools of the MCP servers the CLI runs (ours run in the loop)."""
        name = str(data.get("tool_name", ""))
        if name.startswith(PREFIX) or not name.startswith("mcp__"):
            return {}
        reason = policy_refusal(self.node.tool_policy, self._policy_name(name))
        if reason is None:
            return {}
        self.refused.append(name)
        short = name.removeprefix("mcp__")
        await self.ctx.emit("tool_called", {"tool": short, "input": data.get("tool_input")})
        await self.ctx.emit(
            "tool_error", {"tool": short, "error": reason, "denied_by": "tool_policy"}
        )
        return {"hookSpecificOutput": {"hookEventName": "PreToolUse",
                                       "permissionDecision": "deny",
                                       "permissionDecisionReason": reason}}  # fmt: skip

    def _policy_name(self, name: str) -> str:
        """A CLI tool name as ``tool_policy`` and ``tools:`` name it (``mcp.SERVER.TOOL``).

        The node's server names decide where the server's name ends (it may hold ``_``).
        """
        if name.startswith(PREFIX):
            return name.removeprefix(PREFIX)
        for server in sorted(self.request.mcp_servers, key=lambda s: len(s.name), reverse=True):
            head = f"mcp__{server.name}__"
            if name.startswith(head):
                return f"{m.MCP_TOOL_PREFIX}{server.name}.{name.removeprefix(head)}"
        return name

    @staticmethod
    def _end_session(reason: str) -> dict[str, Any]:
        """The hook's answer that runs nothing more and ends the CLI's session."""
        return {"continue_": False, "stopReason": reason, "hookSpecificOutput": {
            "hookEventName": "PreToolUse", "permissionDecision": "deny",
            "permissionDecisionReason": reason}}  # fmt: skip

    def _defer(self, state: dict[str, Any]) -> dict[str, Any]:
        self.deferred = state
        return {
            "hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "defer"}
        }

    async def _pre_ask_user(self, call: dict[str, Any]) -> Any:
        try:
            record = await self.loop.question(call, "ask_user")
        except ValueError as err:
            return {"hookSpecificOutput": {
                "hookEventName": "PreToolUse", "permissionDecision": "deny",
                "permissionDecisionReason": str(err)}}  # fmt: skip
        record = await self.loop._post(record)
        if not record.pending:
            return {}  # answered: the tool returns the answer
        return self._defer({"kind": "ask_user", "interaction": record.id, "tool_use_id": call["id"],
                            "interactions": [record.id]})  # fmt: skip

    async def _pre_await(self, call: dict[str, Any]) -> Any:
        try:
            it_tools.check_input(it_tools.AWAIT_ANSWERS, call["input"])
        except ValueError:
            return {}  # the call runs, and its result tells the model what is wrong
        store, run_id = self.ctx.store, self.ctx.run_id
        pause_id = f"{self.loop._interaction_id(call)}-await"
        try:
            existing: Interaction | None = await store.get_interaction(pause_id)
        except Exception:
            existing = None
        if existing is not None:
            waiting = [await store.get_interaction(i) for i in existing.waits_on]
            if any(r.pending for r in waiting):
                return self._defer(self._await_state(call, existing))
            return {}
        pending = await store.pending_interactions(run_id, node_id=self.node.name, kind="async")
        if not pending:
            return {}
        await self.loop.close_stale_awaits(keep=pause_id)
        note = call["input"].get("note") or "waiting for the answers to my questions"
        pause = Interaction(
            pause_id, run_id, self.node.name, "await", (str(note),), utcnow(),
            branch_id=self.ctx.branch_id, waits_on=tuple(p.id for p in pending),
        )  # fmt: skip
        pause = await self.loop._post(pause, waits_on=list(pause.waits_on))
        return self._defer(self._await_state(call, pause))

    @staticmethod
    def _await_state(call: dict[str, Any], pause: Interaction) -> dict[str, Any]:
        return {"kind": "await", "interaction": pause.id, "tool_use_id": call["id"],
                "interactions": [pause.id], "waits_on": list(pause.waits_on)}  # fmt: skip

    async def _tool_failed(self, data: dict[str, Any], tool_use_id: str | None, _: Any) -> Any:
        """A call the CLI refused or that failed (unknown tool, input against the schema)."""
        if policy_refusal(self.node.tool_policy, self._policy_name(str(data.get("tool_name")))):
            return {}  # refused by tool_policy: recorded as such where it was refused
        name = str(data.get("tool_name", "")).removeprefix(PREFIX)
        # the CLI checks input against the schema in its own words, which may not name the
        # argument: the model is told ours as well, as on the in-process loop
        ours = self.loop.input_problem(name, data.get("tool_input"))
        await self.ctx.emit(
            "tool_error", {"tool": name, "error": ours or str(data.get("error", ""))}
        )
        if ours is None:
            return {}
        return {"hookSpecificOutput": {"hookEventName": "PostToolUseFailure",
                                       "additionalContext": ours}}  # fmt: skip

    async def _post_tool(self, data: dict[str, Any], tool_use_id: str | None, _: Any) -> Any:
        if self.lost is not None:  # the messages are for the process that has the run now
            return {}
        blocks = await self.loop._inbox(self.skip)
        if not blocks:
            return {}
        text = "\n".join(b["text"] for b in blocks)
        return {"hookSpecificOutput": {"hookEventName": "PostToolUse", "additionalContext": text}}

    async def _stop(self, data: dict[str, Any], tool_use_id: str | None, _: Any) -> Any:
        if self.stop_blocks >= self.backend.max_stop_blocks or self.lost is not None:
            return {}
        blocks = await self.loop._inbox(self.skip)
        if not blocks:
            return {}
        self.stop_blocks += 1  # a late answer buys one more turn
        return {"decision": "block", "reason": "\n".join(b["text"] for b in blocks)}

    # -- running the CLI ------------------------------------------------------
    def _options(self, resume: str | None, fork: bool = False) -> Any:
        sdk = self.sdk
        node = self.node
        names = [PREFIX + spec.name for spec in self.loop.specs]
        if self._images():
            names.append(PREFIX + READ_IMAGE.name)
        # the node's MCP servers: Claude Code starts them; each one's tools that the node
        # names (mcp.SERVER.TOOL), or all of them, are allowed
        # (less what tool_policy refuses; a PreToolUse hook refuses those calls in our words)
        names += cli_allowed(self.request.mcp_servers, node.tools, node.tool_policy)
        env = {
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_TELEMETRY": "1",
            "DISABLE_AUTOUPDATER": "1",
            "ANTHROPIC_CUSTOM_HEADERS": f"x-iterion-node: {node.name}\n"
                                        f"x-iterion-visit: {self.request.visit}\n"
                                        f"x-iterion-turn-base: {self.turn_base}",
            **self.backend.env,
        }  # fmt: skip
        hooks = {
            "PreToolUse": [sdk.HookMatcher(matcher=f"{PREFIX}.*", hooks=[self._pre_tool])],
            "PostToolUse": [sdk.HookMatcher(matcher=f"{PREFIX}.*", hooks=[self._post_tool])],
            "PostToolUseFailure": [sdk.HookMatcher(hooks=[self._tool_failed])],
            "Stop": [sdk.HookMatcher(hooks=[self._stop])],
        }
        if node.tool_policy is not None:  # the MCP servers' tools the CLI runs itself
            hooks["PreToolUse"].append(sdk.HookMatcher(matcher="mcp__.*",
                                                       hooks=[self._policy_gate]))  # fmt: skip
        self.stderr: list[str] = []
        effort = self.request.reasoning_effort  # the CLI's --effort has no "minimal": low
        extra = {"effort": "low" if effort == "minimal" else effort} if effort else {}
        return sdk.ClaudeAgentOptions(
            tools=[], allowed_tools=names,
            mcp_servers={**cli_servers(self.request.mcp_servers), SERVER: self._mcp_server()},
            system_prompt=self.loop.system_prompt(), model=self.request.model or None,
            max_turns=self.backend.max_turns, cwd=str(Path(self.request.workdir).resolve()),
            resume=resume, fork_session=fork, hooks=hooks, env=env,
            cli_path=self.backend.cli_path,
            stderr=self.stderr.append, setting_sources=[], include_partial_messages=True,
            **extra,
        )  # fmt: skip

    async def _query(self, prompt: str, resume: str | None, fork: bool = False) -> Any:
        """One CLI process: stream its messages into events; return its (model) result."""
        sdk = self.sdk
        self.deferred = None
        self.stop_blocks = 0
        result = None
        pending = self._pending
        from iterion_nb.backends.claude_code.reaped import ReapedTransport  # needs the SDK

        options = self._options(resume, fork)
        # the CLI (and the MCP servers it starts) dies with this process: see reaped.py
        transport = ReapedTransport(prompt, options)
        try:
            async for message in sdk.query(prompt=prompt, options=options, transport=transport):
                if result is not None:
                    continue  # after the model's result: the local /cost, not a model turn
                if isinstance(message, sdk.StreamEvent) and message.parent_tool_use_id is None:
                    await self._stream_event(message.event, pending)
                elif isinstance(message, sdk.ResultMessage):
                    await self._flush(pending)
                    if message.stop_reason is not None and result is None:
                        result = message  # (the /cost of a resume answers without a turn)
                    if message.total_cost_usd:
                        self.cost += float(message.total_cost_usd)
        except sdk.CLINotFoundError as err:
            raise NodeError(
                self.node.name,
                f"the claude CLI is missing: {err}. Install claude-agent-sdk (it bundles the"
                " CLI) or set cli_path",
            ) from None
        except sdk.ClaudeSDKError as err:
            tail = " | ".join(line.strip() for line in self.stderr[-5:] if line.strip())
            raise NodeError(
                self.node.name,
                f"the claude CLI failed: {err}" + (f" (stderr: {tail})" if tail else ""),
            ) from None
        ended = self.lost or self.failure  # the run taken over, or over tool_max_steps
        if ended is not None:
            raise ended
        if result is None:
            raise NodeError(self.node.name, "the claude CLI ended without a result")
        if result.is_error:
            raise NodeError(self.node.name, f"the claude CLI reported an error: {result.result}")
        return result

    async def _stream_event(self, event: dict[str, Any], pending: dict[str, Any]) -> None:
        """Account for one model message from its raw stream: start, tool calls, usage, stop."""
        kind = event.get("type")
        if kind == "message_start":
            await self._flush(pending)
            message = event.get("message") or {}
            pending.update({"usage": dict(message.get("usage") or {}), "calls": []})
        elif kind == "content_block_start" and pending:
            block = event.get("content_block") or {}
            if block.get("type") == "tool_use":
                pending["calls"].append(str(block.get("name", "")).removeprefix(PREFIX))
        elif kind == "message_delta" and pending:
            pending["usage"].update(event.get("usage") or {})
        elif kind == "message_stop":
            await self._flush(pending)

    async def _flush(self, pending: dict[str, Any]) -> None:
        if not pending:
            return
        usage = pending["usage"]
        tokens_in, tokens_out = (
            int(usage.get("input_tokens", 0)),
            int(usage.get("output_tokens", 0)),
        )
        turn = self.turns
        self.turns += 1
        if pending["calls"]:
            self.steps += 1
            limit = self.node.tool_max_steps
            if limit is not None and self.steps > limit and self.failure is None:
                self.failure = NodeError(self.node.name, f"used more than tool_max_steps ({limit})")
        asked: dict[str, Any] = {"model": self.request.model, "turn": turn}
        if self.request.reasoning_effort is not None:  # as the in-process loop records it
            asked["reasoning_effort"] = self.request.reasoning_effort
        await self.ctx.emit("llm_request", asked)
        self.ctx.charge(tokens_in + tokens_out, 0.0)
        await self.ctx.emit(
            "llm_step_finished",
            {"tokens_in": tokens_in, "tokens_out": tokens_out, "cost_usd": 0.0,
             "stop_reason": "tool_use" if pending["calls"] else "end_turn",
             "tool_calls": pending["calls"]},
        )  # fmt: skip
        offered = {spec.name for spec in self.loop.specs} | (
            {READ_IMAGE.name} if self._images() else set()
        )
        served = tuple(f"mcp__{server.name}__" for server in self.request.mcp_servers)
        for name in pending["calls"]:
            if name.startswith(served) and served:  # a tool of the node's MCP servers
                if name in self.refused:  # tool_policy refused it: recorded then, not run
                    self.refused.remove(name)
                    continue
                await self.ctx.emit("tool_called", {"tool": name.removeprefix("mcp__")})
                continue
            if name not in offered:  # the CLI answers these itself; record them as we would
                await self.ctx.emit("tool_error", {"tool": name, "error": f"unknown tool '{name}'"})
        pending.clear()

    async def run(self) -> BackendResult:
        """To the final answer (repairing it once), or to a pause."""
        state = self.request.resume
        if state:
            await self._check_answered(state)
            if state["kind"] == "ask_user":  # the CLI asks the deferred question again
                self.loop.reasks.bind(str(state["tool_use_id"]), str(state["interaction"]))
            await self.loop._watch_expiries()
            result = await self._query(RESUME_PROMPT, state["session_id"])
        else:
            parent = self._inherited()
            fork = parent is not None and self.request.fork
            result = await self._query(self.request.user or "Begin.", parent, fork)
        repaired = False
        while True:
            if self.lost is not None:
                raise self.lost
            if result.stop_reason == "tool_deferred" and self.deferred is not None:
                self.ctx.charge(0, self.cost)
                self.cost = 0.0
                state = {**self.deferred, "session_id": result.session_id, "turns": self.turns,
                         "steps": self.steps, "turn_base": self.turn_base,
                         STATE_KEY: self.loop.reasks.asked()}  # fmt: skip
                raise PauseRun(self.deferred["interaction"], state)
            output, problems = self.loop._final(result.result or "")
            if not problems:
                self.ctx.charge(0, self.cost)
                session = {"backend": "claude_code", "session_id": result.session_id,
                           "turns": self.turn_base + self.turns}  # fmt: skip
                return BackendResult(output, cost_usd=0.0, session=session)
            if repaired:
                raise NodeError(
                    self.node.name,
                    f"final answer does not match schema '{self.node.output}':"
                    f" {'; '.join(problems)}",
                )
            repaired = True
            result = await self._query(repair_prompt(problems), result.session_id)

    def _inherited(self) -> str | None:
        """The CLI session this node continues or forks (``session:``), or None."""
        session = inherited_session(self.request, "claude_code")
        return None if session is None else str(session["session_id"])

    async def _check_answered(self, state: dict[str, Any]) -> None:
        """Resuming before the answers are in pauses again at once (no CLI started)."""
        store = self.ctx.store
        if state["kind"] == "ask_user":
            if (await store.get_interaction(state["interaction"])).pending:
                raise PauseRun(state["interaction"], state)
            return
        records = [await store.get_interaction(i) for i in state["waits_on"]]
        if any(r.pending for r in records):
            raise PauseRun(state["interaction"], state)
