"""``agentrt work [PATH]``: the interactive chat on a `WorkspaceAgent` for a folder.

Everything ``agentrt chat`` does (streaming, live tool calls, inline approvals, Ctrl-C, saved
sessions) on an agent that works in the folder: file tools and a (sandboxed) shell there, the
folder's ``AGENTS.md`` in its prompt, ``@path`` mentions attached, skills, plan mode and
subagents. On top of the chat's commands:

- ``/plan [on|off]`` (or Shift+Tab, where readline is GNU readline) toggles plan mode: the agent
  may only read and write its plan until you approve the plan it submits with ``plan_exit``;
  the prompt shows ``(plan)`` meanwhile. Shift+Tab keeps what you had typed.
- ``/skills`` lists the skills the agent can load.

Sessions live in ``<PATH>/.agentrt/state.db`` unless ``--store`` names another store;
``--continue`` picks the folder's most recent session. ``--model scripted:workspace`` is an
offline model that understands ``write PATH: TEXT``, ``edit PATH: OLD -> NEW``, ``read PATH``,
``run COMMAND`` and ``plan: STEPS`` (and tells which files a message attached), to try it out.
"""

# No `from __future__ import annotations`: typer reads the command signature at runtime.
import os
import re
import shlex
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Annotated, Any

from agentrt.cli.chat import ANGLE, HELP, PROMPT, ChatRenderer, ChatSession, _one_line, _safe

if TYPE_CHECKING:
    from agentrt.harness.workspace import WorkspaceAgent
    from agentrt.message import ContentBlock, Msg
    from agentrt.model.base import ChatModel, ModelRequest
    from agentrt.state.base import AgentStateStore

__all__ = ["WorkRenderer", "WorkSession", "build_work_agent", "build_work_command", "workspace_plan"]

PLAN_PROMPT = f"[bold cyan]you[/] [bold yellow](plan)[/] [bold cyan]{ANGLE}[/] "
WORK_HELP = """\
[bold]workspace[/]
  /plan \\[on|off]  toggle plan mode (also Shift+Tab): the agent reads and plans, and asks you
                  to approve its plan before it changes anything
  /skills         the skills the agent can load
  @path           attach a file of the workspace to your message (@"name with spaces.txt")"""
_SHIFT_TAB = r'"\e[Z": "\C-a/plan \C-j"'
"""readline macro: Shift+Tab submits ``/plan <what was typed>``; the text comes back on the next prompt."""


# --------------------------------------------------------------------------------------------------
# the offline model
# --------------------------------------------------------------------------------------------------
_WRITE = re.compile(r"(?:write|create)\s+(?P<path>\S+?)\s*:\s?(?P<content>.*)", re.S | re.I)
_EDIT = re.compile(r"edit\s+(?P<path>\S+?)\s*:\s?(?P<old>.*?)\s*->\s*(?P<new>.*)", re.S | re.I)
_READ = re.compile(r"read\s+(?P<path>\S+)\s*", re.I)
_RUN = re.compile(r"run\s+(?P<command>.+)", re.S | re.I)
_PLAN = re.compile(r"plan\s*:\s?(?P<plan>.+)", re.S | re.I)
_ATTACHED = re.compile(
    r"^\[Attached file (?P<rel>.+?) \(\d+ bytes\), mentioned as .+\]\n`{3,}\n(?P<first>[^\n]*)", re.M
)
WORKSPACE_HELP = (
    "I'm the offline workspace model (a few scripted rules, not a language model). Try: "
    "`write notes.md: some text`, `edit notes.md: some -> more`, `read notes.md`, `run ls`, "
    "`plan: 1. do this 2. then that`, and attach files with @path."
)


def _tool_call(text: str) -> "ContentBlock | None":
    from agentrt.message import ToolUseBlock

    text = text.strip()
    if (found := _EDIT.fullmatch(text)) is not None:
        return ToolUseBlock(name="edit_file", input={"path": found["path"], "old": found["old"], "new": found["new"]})
    if (found := _WRITE.fullmatch(text)) is not None:
        return ToolUseBlock(name="write_file", input={"path": found["path"], "content": found["content"] + "\n"})
    if (found := _READ.fullmatch(text)) is not None:
        return ToolUseBlock(name="read_file", input={"path": found["path"]})
    if (found := _RUN.fullmatch(text)) is not None:
        return ToolUseBlock(name="run_command", input={"command": found["command"]})
    if (found := _PLAN.fullmatch(text)) is not None:
        return ToolUseBlock(name="plan_write", input={"content": found["plan"].strip() + "\n"})
    return None


def _after_results(request: "ModelRequest", last: "Msg") -> "list[ContentBlock]":
    from agentrt.message import TextBlock, ToolResultBlock, ToolUseBlock

    result = last.blocks(ToolResultBlock)[-1]
    tools = {schema.name for schema in request.tools}
    if result.name == "plan_write" and result.state == "success" and "plan_exit" in tools:
        return [TextBlock(text="The plan is written; I'll ask you to approve it."), ToolUseBlock(name="plan_exit")]
    if result.state == "success":
        return [TextBlock(text=f"Done ({result.name}): {_one_line(result.text, 400)}")]
    return [TextBlock(text=f"The {result.name} call ended as {result.state}: {_one_line(result.text, 400)}")]


def workspace_plan(request: "ModelRequest") -> "list[ContentBlock]":
    """The ``scripted:workspace`` model: one tool call per command-like message, then a one-line answer."""
    from agentrt.message import TextBlock, ToolResultBlock

    last = request.messages[-1] if request.messages else None
    if last is None or last.role != "user":
        return [TextBlock(text=WORKSPACE_HELP)]
    if last.has(ToolResultBlock):
        return _after_results(request, last)
    texts = last.blocks(TextBlock)
    typed = texts[0].text if texts else ""
    seen = [f"{m['rel']}: «{m['first']}»" for t in texts[1:] for m in _ATTACHED.finditer(t.text)]
    prefix = f"I see {len(seen)} attached file(s): {'; '.join(seen)}. " if seen else ""
    call = _tool_call(typed)
    if call is None:
        return [TextBlock(text=prefix + (WORKSPACE_HELP if not seen else f"You said: {typed}"))]
    if getattr(call, "name", "") not in {schema.name for schema in request.tools}:
        return [TextBlock(text=f"{prefix}I would need {getattr(call, 'name', '')}, which I do not have here.")]
    return [TextBlock(text=prefix), call] if prefix else [call]


def _scripted_factory(name: str, *, base_url: str | None = None, api_key: str | None = None, **options: Any) -> Any:
    from agentrt.cli.chat import _scripted_factory as chat_factory

    if name != "workspace":
        return chat_factory(name, base_url=base_url, api_key=api_key, **options)
    from agentrt.errors import UserError
    from agentrt.model.scripted import ScriptedModel

    unknown = set(options) - {"latency", "chunk_delay"}
    if unknown:
        raise UserError(f"scripted:workspace takes the options latency and chunk_delay, not {sorted(unknown)}")
    model = ScriptedModel.from_function(workspace_plan, name="workspace", latency=float(options.get("latency", 0.0)))
    model.chunk_delay = float(options.get("chunk_delay", 0.0))
    return model


def register_work_models() -> None:
    """The chat's ``scripted:`` models plus ``scripted:workspace`` (idempotent)."""
    from agentrt.model.registry import register_provider

    register_provider("scripted", _scripted_factory)


# --------------------------------------------------------------------------------------------------
# the session
# --------------------------------------------------------------------------------------------------
class WorkRenderer(ChatRenderer):
    """The chat's renderer plus the workspace events: attached files and plan-mode changes."""

    def _on_mentions_expanded(self, event: Any, src: str) -> None:
        for mention in event.mentions:
            if mention.attached:
                cut = ", cut" if mention.truncated else ""
                self.line(f"{_safe(mention.rel)} ({mention.size} bytes{cut})", "dim", prefix=f"{src}+ attached ")
            else:
                self.line(f"{_safe(mention.token)} not attached: {_safe(mention.reason)}", "yellow",
                          prefix=f"{src}! ", prefix_style="bold yellow")  # fmt: skip

    def _on_plan_mode_changed(self, event: Any, src: str) -> None:
        if event.active:
            self.line("the agent plans; it asks you to approve the plan before changing anything", "yellow",
                      prefix=f"{src}plan mode on: ", prefix_style="bold yellow")  # fmt: skip
        else:
            why = " (plan approved)" if event.reason == "plan_approved" else ""
            self.line(f"plan mode off{why}", "bold green", prefix=src)


class WorkSession(ChatSession):
    """The chat loop on a `WorkspaceAgent`: plan mode (``/plan``, Shift+Tab), ``/skills``, attachments shown."""

    title = "agentrt work"
    renderer_class = WorkRenderer

    def __init__(
        self, *args: Any, root: str, continue_last: bool = False, start_in_plan: bool = False, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.root = root
        self.continue_last = continue_last
        self.start_in_plan = start_in_plan
        self.plan_mode = False
        self._refill: list[str] = []

    # -- hooks of the chat loop -------------------------------------------------------------------------
    def prompt_text(self) -> str:
        """``you (plan)`` and the angle mark in plan mode, else the chat's prompt."""
        return PLAN_PROMPT if self.plan_mode else PROMPT

    def resume_hint(self) -> str:
        """The ``agentrt work`` command that continues this session (quoted for a POSIX shell)."""
        if self.resume_command is not None:
            return super().resume_hint()
        return shlex.join(["agentrt", "work", self.root, "--model", self.model_id, "--session", self.session_id])

    def run(self) -> int:
        """Chat until /exit (see `ChatSession.run`), with Shift+Tab bound to ``/plan``."""
        self._bind_keys()
        return super().run()

    def _bind_keys(self) -> None:
        try:
            import readline
        except ImportError:
            return
        if "libedit" in (readline.__doc__ or ""):
            return  # macOS's libedit has another binding syntax: /plan only
        readline.parse_and_bind(_SHIFT_TAB)

        def refill() -> None:
            if self._refill:
                readline.insert_text(self._refill.pop())
                readline.redisplay()

        readline.set_pre_input_hook(refill)

    def _banner(self) -> None:
        from rich.markup import escape

        if self.continue_last:
            sessions = self._run(lambda: self.store.list_sessions(self.user_id, agent=self.agent.state_key))
            if sessions:
                self._set_session(sessions[0].session_id)
        if self.start_in_plan:
            self._run(lambda: self.agent.enter_plan_mode(self.ctx))
        super()._banner()
        agent: WorkspaceAgent = self.agent  # type: ignore[assignment]
        out = self.console.print
        out(f"workspace [bold]{escape(self.root)}[/]", highlight=False)
        files = self._run(agent.instructions.files) if agent.instructions is not None else []
        if files:
            shown = ", ".join(f"{f.shown} ({f.size} bytes{', cut' if f.truncated else ''})" for f in files)
            out(f"instructions: {escape(shown)}", style="dim", highlight=False)
        skills = self._skills()
        if skills:
            out(f"skills: {len(skills)} (/skills lists them)", style="dim", highlight=False)
        self._refresh_plan_mode()
        tip = "plan mode is ON: /plan or Shift+Tab leaves it" if self.plan_mode else "/plan or Shift+Tab: plan mode"
        out(f"{tip} · @path attaches a file", style="dim", highlight=False)

    def _command(self, line: str) -> bool:
        name, _, arg = line.partition(" ")
        name = name.lower()
        if name == "/plan":
            self._toggle_plan(arg)
        elif name == "/skills":
            self._list_skills()
        elif name in ("/help", "/?"):
            self.console.print(HELP, highlight=False)
            self.console.print(WORK_HELP, highlight=False)
        else:
            keep = super()._command(line)
            if name == "/new":
                self._refresh_plan_mode()
            return keep
        return True

    def _send(self, text: str) -> None:
        try:
            super()._send(text)
        finally:
            self._refresh_plan_mode()  # an approved plan (plan_exit) ends plan mode

    # -- plan mode and skills ---------------------------------------------------------------------------------
    def _refresh_plan_mode(self) -> None:
        in_plan = getattr(self.agent, "in_plan_mode", None)
        self.plan_mode = bool(in_plan is not None and self._run(lambda: in_plan(self.ctx)))

    def _toggle_plan(self, arg: str) -> None:
        word = arg.strip().lower()
        if word in ("on", "off"):
            wanted = word == "on"
        else:
            wanted = not self.plan_mode
            if arg.strip():
                self._refill.append(arg.strip())  # Shift+Tab: what was typed comes back on the prompt
        if wanted:
            self._run(lambda: self.agent.enter_plan_mode(self.ctx))
        else:
            self._run(lambda: self.agent.exit_plan_mode(self.ctx))
        self._refresh_plan_mode()
        if self.plan_mode:
            self.console.print(
                "plan mode on: the agent reads and writes its plan, then asks you to approve it before it changes "
                "anything (/plan again leaves)",
                style="yellow",
                highlight=False,
            )
        else:
            self.console.print("plan mode off: the agent acts (with approvals as usual)", style="green")

    def _skills(self) -> "Mapping[str, Any]":
        skills = getattr(self.agent, "skills", None)
        return skills if isinstance(skills, Mapping) else {}

    def _list_skills(self) -> None:
        skills = self._skills()
        if not skills:
            self.console.print(
                "no skills: add skill folders (each with a SKILL.md) under skills/ or .agentrt/skills/",
                style="dim",
                highlight=False,
            )
            return
        for name, skill in sorted(skills.items()):
            description = _one_line(str(getattr(skill, "description", "")), 200)
            self.console.print(f"  [bold]{_escape(name)}[/]  {_escape(description)}", highlight=False)


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(_safe(text))


# --------------------------------------------------------------------------------------------------
# the command
# --------------------------------------------------------------------------------------------------
def build_work_agent(
    path: str,
    model_id: str,
    *,
    store: "AgentStateStore | None" = None,
    permission: str = "default",
    model_options: Mapping[str, Any] | None = None,
    max_iters: int = 50,
    sandbox: bool = True,
    shell: bool = True,
) -> "WorkspaceAgent":
    """The `WorkspaceAgent` of ``agentrt work`` (its own SQLite store in the folder unless `store` is given)."""
    from agentrt.harness.workspace import WorkspaceAgent
    from agentrt.model.registry import model_from_id
    from agentrt.permission import PermissionMode

    register_work_models()
    model: ChatModel = model_from_id(model_id, **dict(model_options or {}))
    return WorkspaceAgent(
        path,
        model,
        state_store=store,
        permission=PermissionMode(permission),
        max_iters=max_iters,
        sandbox="bwrap" if sandbox else None,
        shell=shell,
    )


def build_work_command() -> "Callable[..., None]":
    """The ``work`` command function, for ``app.command("work")(build_work_command())``."""
    import typer

    from agentrt.context import ANONYMOUS_USER

    def work(
        ctx: typer.Context,
        model: Annotated[
            str, typer.Option("--model", "-m", help="Model id, e.g. openai:gpt-4o, or scripted:workspace offline.")
        ],
        path: Annotated[str, typer.Argument(help="The folder to work in (default: the current directory).")] = ".",
        session: Annotated[
            str | None, typer.Option("--session", "-s", help="Session id to continue (default: a new one).")
        ] = None,
        continue_last: Annotated[
            bool, typer.Option("--continue", "-c", help="Continue the folder's most recent session.")
        ] = False,
        user: Annotated[str, typer.Option("--user", "-u", help="User id owning the session.")] = ANONYMOUS_USER,
        store: Annotated[
            str | None, typer.Option("--store", help="State store URL (default: PATH/.agentrt/state.db).")
        ] = None,
        permission: Annotated[
            str,
            typer.Option("--permission", help="Permission mode: default, accept_edits, explore, bypass, dont_ask."),
        ] = "default",
        plan: Annotated[bool, typer.Option("--plan", help="Start in plan mode.")] = False,
        sandbox: Annotated[
            bool, typer.Option("--sandbox/--no-sandbox", help="Run shell commands in a bubblewrap sandbox.")
        ] = True,
        shell: Annotated[bool, typer.Option("--shell/--no-shell", help="Give the agent a shell.")] = True,
        option: Annotated[
            list[str] | None,
            typer.Option("--option", "-o", help="Model option KEY=VALUE, e.g. temperature=0.2 (repeatable)."),
        ] = None,
        max_iters: Annotated[int, typer.Option("--max-iters", help="Most reasoning steps per message.")] = 50,
        thinking: Annotated[bool, typer.Option("--thinking/--no-thinking", help="Show the model's thinking.")] = True,
    ) -> None:
        """Work on a folder with an agent: files, shell, AGENTS.md, @path, skills, plan mode, approvals."""
        from rich.console import Console

        from agentrt.cli._output import print_error
        from agentrt.cli._resume import resume_from_context
        from agentrt.cli.chat import _parse_options
        from agentrt.errors import AgentrtError
        from agentrt.message import new_id

        console = Console(soft_wrap=True)
        try:
            agent, state_store, store_url = _open(
                path, model, store, permission, _parse_options(option or ()), max_iters, sandbox, shell
            )
        except (AgentrtError, ValueError) as exc:
            print_error(exc)
            raise typer.Exit(2) from None
        session_cli = WorkSession(
            console,
            agent,
            state_store,
            user_id=user,
            session_id=session or f"work-{new_id()[:8]}",
            model_id=model,
            store_url=store_url,
            tool_names=agent.toolkit.names(),
            show_thinking=thinking,
            root=agent.root,
            continue_last=continue_last and session is None,
            start_in_plan=plan,
            # The folder made absolute; --continue becomes the --session it picked.
            resume_command=resume_from_context(
                ctx, ("agentrt", "work"), overrides={"path": agent.root}, drop=("continue_last",)
            ),
        )
        session_cli.ends_process = True
        code = session_cli.run()
        sys.stdout.flush()
        if code:
            raise typer.Exit(code)

    return work


def _open(
    path: str,
    model: str,
    store: str | None,
    permission: str,
    options: Mapping[str, Any],
    max_iters: int,
    sandbox: bool,
    shell: bool,
) -> "tuple[WorkspaceAgent, AgentStateStore, str]":
    """The agent, its store and the store's URL for the banner."""
    from agentrt.state import store_from_url

    state_store = store_from_url(store) if store else None
    agent = build_work_agent(
        path,
        model,
        store=state_store,
        permission=permission,
        model_options=options,
        max_iters=max_iters,
        sandbox=sandbox,
        shell=shell,
    )
    url = store or f"sqlite:///{os.path.join(agent.root, '.agentrt', 'state.db')}"
    return agent, agent.state_store, url
