"""The public surface: what `import agentrt` exposes and what it must not import."""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect
import json
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import agentrt

SRC = str(Path(__file__).parents[2] / "src")
PYPROJECT = Path(__file__).parents[2] / "pyproject.toml"

# DESIGN.md "Public API": `from agentrt import (...)`, plus the option groups of `ReActAgent`
# (`LoopOptions`, `OutputOptions`, `MemoryOptions`). Exactly these names, no more, no fewer.
DOCUMENTED = {
    "AudioBlock",
    "Base64Source",
    "ConfirmResult",
    "GenerateReason",
    "ImageBlock",
    "LoopOptions",
    "MemoryOptions",
    "Middleware",
    "Msg",
    "OutputOptions",
    "PermissionContext",
    "PermissionMode",
    "PermissionRule",
    "ReActAgent",
    "RuntimeContext",
    "TextBlock",
    "ThinkingBlock",
    "ToolResultBlock",
    "ToolUseBlock",
    "Toolkit",
    "UsageLimitExceeded",
    "UsageLimits",
    "UserAgent",
    "VideoBlock",
    "tool",
}

# The public modules DESIGN.md names and exactly what each exports (the DESIGN.md names plus what
# they export today). Adding or removing a name changes the public API: update this table in the
# same change, with the docs and CHANGELOG.md.
PUBLIC_MODULES: dict[str, set[str]] = {
    "agentrt": DOCUMENTED,
    "agentrt.model": {
        "ChatModel",
        "ChatResponse",
        "FallbackModel",
        "GenerateOptions",
        "ModelPrice",
        "ModelRequest",
        "RetryModel",
        "ScriptedModel",
        "TextProtocolModel",
        "ToolCallChunk",
        "ToolSchema",
        "context_window",
        "count_tokens",
        "ensure_tool_calling",
        "model_from_id",
        "register_provider",
    },
    "agentrt.state": {
        "AgentState",
        "AgentStateStore",
        "BaseStateStore",
        "DEFAULT_STATE_URL",
        "InMemoryStateStore",
        "JsonFileStateStore",
        "Pending",
        "PendingCall",
        "RedisStateStore",
        "SessionInfo",
        "SqlStateStore",
        "SqliteStateStore",
        "default_state_url",
        "flatten_pending",
        "store_from_url",
    },
    "agentrt.pipeline": {
        "AgentLike",
        "Composite",
        "FanOut",
        "Loop",
        "MsgHub",
        "RouteSelected",
        "Router",
        "Sequential",
        "combine",
        "fanout",
        "handoff",
        "is_paused",
        "is_stopped",
        "loop",
        "route",
        "sequential",
    },
    "agentrt.errors": {
        "AgentrtError",
        "AuthenticationError",
        "ContextWindowExceededError",
        "DuplicateToolError",
        "FencedError",
        "InvalidAnswerError",
        "InvalidTypeError",
        "InvalidValueError",
        "MissingExtraError",
        "McpCallLostError",
        "McpConnectionError",
        "McpError",
        "ModelAPIError",
        "ModelBehaviorError",
        "ModelConnectionError",
        "ModelError",
        "ModelTimeoutError",
        "NotPendingError",
        "RateLimitError",
        "SessionBusyError",
        "RunLimitError",
        "SkillError",
        "StateConflictError",
        "StateStoreError",
        "StructuredOutputError",
        "ToolArgumentsError",
        "ToolDefinitionError",
        "ToolError",
        "ToolRetry",
        "ToolSuspended",
        "UnexpectedModelCallError",
        "UsageLimitExceeded",
        "UserError",
    },
    "agentrt.permission": {
        "COMMAND_KEYS",
        "ConfirmResult",
        "Decision",
        "PATH_KEYS",
        "PermissionContext",
        "PermissionDecision",
        "PermissionEngine",
        "PermissionMode",
        "PermissionRule",
        "check_answer_rule",
        "is_command_key",
        "is_dangerous_path",
        "is_path_key",
        "refuse_dangerous_path",
        "suggest_rules",
        "unmatched_rules",
        "workspace_root",
    },
    "agentrt.memory": {
        "ContextCompressor",
        "ContextConfig",
        "LongTermMemory",
        "MemoryItem",
        "OpenAIEmbeddings",
        "PostgresLongTermMemory",
        "SqliteLongTermMemory",
        "format_memories",
    },
    "agentrt.harness": {
        "FileMentions",
        "InstructionsFile",
        "Mention",
        "MentionExpansion",
        "MentionRef",
        "MentionsExpanded",
        "SubagentLimits",
        "SubagentSpec",
        "SubagentSpecError",
        "SubagentTask",
        "SubagentTools",
        "WorkspaceAgent",
        "WorkspaceInstructions",
        "expand_mentions",
        "find_mentions",
        "load_subagent_specs",
        "parse_subagent_spec",
    },
    "agentrt.testing": {
        "FakeClock",
        "ModelRequest",
        "ScriptedModel",
        "check_knowledge_store",
        "check_long_term_memory",
        "check_state_store",
    },
    "agentrt.knowledge": {
        "AddReport",
        "Chunk",
        "Citation",
        "Document",
        "EmbedTimeoutError",
        "Knowledge",
        "KnowledgeStore",
        "MemoryKnowledgeStore",
        "NoCallerError",
        "OpenAIEmbeddings",
        "Passage",
        "PostgresKnowledgeStore",
        "SqliteKnowledgeStore",
    },
    "agentrt.evals": {
        "ArgMatcher",
        "BatchInputError",
        "BatchProgress",
        "BatchReport",
        "BatchRow",
        "Callable",
        "Case",
        "CaseResult",
        "Change",
        "Comparison",
        "Contains",
        "Dataset",
        "DatasetError",
        "Equals",
        "EvalContext",
        "EvalReport",
        "Evaluator",
        "ExpectedToolCall",
        "Executor",
        "JsonSchema",
        "LLMJudge",
        "LocalExecutor",
        "MaxCost",
        "MaxLatency",
        "MaxTokens",
        "ProgressUpdate",
        "PydanticModel",
        "RayExecutor",
        "Regex",
        "RemoteWork",
        "Score",
        "ToolTrajectory",
        "compare",
        "match_trajectory",
        "read_rows",
        "run_batch",
    },
}


def _exported(module_name: str) -> dict[str, object]:
    module = importlib.import_module(module_name)
    return {name: getattr(module, name) for name in module.__all__}


def _is_private(module_name: str) -> bool:
    return any(part.startswith("_") for part in module_name.split("."))


def test_all_is_the_documented_surface() -> None:
    assert sorted(agentrt.__all__) == sorted(DOCUMENTED)
    for name in agentrt.__all__:
        assert hasattr(agentrt, name), name


def test_public_modules_export_exactly_their_names() -> None:
    for module_name, expected in PUBLIC_MODULES.items():
        module = importlib.import_module(module_name)
        exported = list(module.__all__)
        assert len(exported) == len(set(exported)), f"{module_name}.__all__ lists a name twice"
        added, removed = set(exported) - expected, expected - set(exported)
        assert not added and not removed, f"{module_name}.__all__: added {sorted(added)}, removed {sorted(removed)}"
        for name in exported:
            assert hasattr(module, name), f"{module_name}.{name} is in __all__ but does not resolve"


def test_exported_objects_come_from_public_agentrt_modules() -> None:
    # An exported class or function whose `__module__` is a private (`_`-prefixed) module shows users
    # the private path in reprs, tracebacks, pickles and API docs: define it in a public module (or set
    # its `__module__` to the public module that re-exports it).
    private: dict[str, str] = {}
    for module_name in PUBLIC_MODULES:
        for name, obj in _exported(module_name).items():
            if not (inspect.isclass(obj) or inspect.isfunction(obj)):
                continue  # constants (DEFAULT_STATE_URL, COMMAND_KEYS) have no home module
            home = obj.__module__
            assert home == "agentrt" or home.startswith("agentrt."), f"{module_name}.{name} comes from {home}"
            if _is_private(home) and not _is_private(module_name):
                private[f"{module_name}.{name}"] = home
    assert not private, f"exported from a private module (define them in a public one): {private}"


def test_version_is_the_installed_distribution_version() -> None:
    assert agentrt.__version__ == importlib.metadata.version("agentrt")
    with PYPROJECT.open("rb") as file:
        assert agentrt.__version__ == tomllib.load(file)["project"]["version"]


def test_version_falls_back_to_pyproject_in_a_source_tree() -> None:
    with PYPROJECT.open("rb") as file:
        assert agentrt._source_tree_version() == tomllib.load(file)["project"]["version"]


def test_cli_version_prints_the_package_version() -> None:
    command = shutil.which("agentrt", path=str(Path(sys.executable).parent))
    assert command is not None, "the agentrt console script is not installed beside this interpreter"
    out = subprocess.run([command, "--version"], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == f"agentrt {agentrt.__version__}"


HEAVY = (
    "openai",
    "anthropic",
    "google.genai",
    "mcp",
    "redis",
    "asyncpg",
    "asyncmy",
    "sqlalchemy",
    "aiohttp",
    "httpx",
    "starlette",
    "fastapi",
    "uvicorn",
    "rich",
    "typer",
    "pydantic",
    "opentelemetry",
    "prometheus_client",
    "genai_prices",
)


def test_import_agentrt_loads_no_sdk_driver_or_server_library() -> None:
    code = (
        "import sys, json, agentrt, agentrt.model, agentrt.state, agentrt.events, agentrt.errors; "
        f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {list(HEAVY)!r} "
        "or m.startswith('google.genai'))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env={"PYTHONPATH": SRC}
    )
    assert json.loads(out.stdout) == []


def test_public_dataclasses_are_keyword_only() -> None:
    import dataclasses

    from agentrt import events, message

    for module in (message, events):
        for name in module.__all__:
            obj = getattr(module, name)
            if isinstance(obj, type) and dataclasses.is_dataclass(obj):
                for field in dataclasses.fields(obj):
                    assert field.kw_only, f"{name}.{field.name} must be keyword-only"
