"""`TextProtocolModel`: the wrapper that drives a text-only model with the ReAct protocol."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Literal

from agentrt.errors import UserError
from agentrt.message import (
    Msg,
    TextBlock,
    TokenUsage,
    _new_call_id,
)
from agentrt.model._accumulate import _merge_usage
from agentrt.model.base import ChatModel, ChatResponse, GenerateOptions, ToolCallChunk, ToolSchema
from agentrt.model.text_protocol._parser import (
    _FINAL_HINT,
    _NO_DECISION,
    ReactParse,
    _clean_answer,
    _split_reasoning,
    _strip_control_tokens,
    _unwrap_fence,
    parse_react,
)
from agentrt.model.text_protocol._prompt import (
    CORRECTION,
    _convert_assistant,
    _convert_user,
    _has_tool_blocks,
    _needs_conversion,
    render_tool_prompt,
)

if TYPE_CHECKING:
    from agentrt.model.pricing import ModelPrice

logger = logging.getLogger(__name__)

ToolCallingMode = Literal["native", "text", "auto"]
ToolsArg = Sequence[ToolSchema] | Mapping[str, ToolSchema] | None


# --------------------------------------------------------------------------------------------------
# the wrapper
# --------------------------------------------------------------------------------------------------
class _Attempt:
    """One inner model reply: buffers its text and streams a final answer as soon as it is sure.

    Work per chunk stays proportional to the chunk: the text is kept as parts, the final-answer
    label is looked for in a small window, and once the answer streams only its not-yet-sent tail
    is examined.
    """

    __slots__ = (
        "_parts",
        "_window",
        "answer_parts",
        "calls",
        "emitted_thought",
        "finish_reason",
        "inner_thinking",
        "mode",
        "pending",
        "stream_answer",
        "tools",
        "usage",
        "yielded",
    )

    def __init__(self, tools: dict[str, ToolSchema], stream_answer: bool) -> None:
        self.tools = tools
        self.stream_answer = stream_answer
        self._clear()

    def _clear(self) -> None:
        self._parts: list[str] = []
        self._window = ""
        self.mode = "undecided" if self.stream_answer else "buffer"  # then "answer" or "buffer"
        self.pending = ""  # answer text received but not sent yet (answer mode)
        self.emitted_thought = ""
        self.answer_parts: list[str] = []
        self.inner_thinking: list[ChatResponse] = []
        self.calls: list[ToolCallChunk] = []
        self.usage: TokenUsage | None = None
        self.finish_reason: str | None = None
        self.yielded = False

    @property
    def text(self) -> str:
        """Everything the inner model said so far."""
        parts = self._parts
        if len(parts) > 1:
            parts[:] = ["".join(parts)]
        return parts[0] if parts else ""

    @property
    def emitted_answer(self) -> str:
        """The part of the final answer already streamed."""
        return "".join(self.answer_parts)

    def feed(self, chunk: ChatResponse) -> Iterator[ChatResponse]:
        if chunk.restart is not None:
            # The inner model started its reply over (e.g. a fallback model took over).
            yielded = self.yielded
            self._clear()
            if yielded:
                yield ChatResponse(restart=chunk.restart)
        if chunk.thinking or chunk.thinking_signature:
            piece = ChatResponse(thinking=chunk.thinking, thinking_signature=chunk.thinking_signature)
            self.inner_thinking.append(piece)
            self.yielded = True
            yield piece
        if chunk.blocks:
            self.yielded = True
            yield ChatResponse(blocks=chunk.blocks)
        if chunk.tool_calls:
            self.calls.extend(chunk.tool_calls)
        if chunk.usage is not None:
            self.usage = chunk.usage if self.usage is None else _merge_usage(self.usage, chunk.usage)
        if chunk.finish_reason is not None:
            self.finish_reason = chunk.finish_reason
        if chunk.text:
            self._parts.append(chunk.text)
            if self.mode == "undecided":
                yield from self._detect(chunk.text)
            elif self.mode == "answer":
                self.pending += chunk.text
                yield from self._send_answer()

    def _detect(self, delta: str) -> Iterator[ChatResponse]:
        # Parse only when a final-answer label may just have arrived; the parse says whether an
        # action came first (then nothing streams: the reply is read when complete).
        window = self._window + delta
        self._window = window[-40:]
        if not _FINAL_HINT.search(window):
            return
        text = self.text
        parsed = parse_react(text, self.tools)
        if parsed.actions:
            self.mode = "buffer"
            return
        if parsed.final_answer is None:
            return
        answer = parsed.final_answer
        offset = len(text)
        if answer:
            offset = text.rfind(answer)
            if offset < 0 or text[offset + len(answer) :].strip():
                self.mode = "buffer"  # the answer is not a plain tail of the text (CRLF, fences)
                return
        self.mode = "answer"
        self.pending = text[offset:].lstrip()
        if parsed.thought:
            self.emitted_thought = parsed.thought
            self.yielded = True
            yield ChatResponse(thinking=parsed.thought)
        yield from self._send_answer()

    def _send_answer(self) -> Iterator[ChatResponse]:
        pending = self.pending
        if not self.answer_parts:
            pending = pending.lstrip()
        cut = _settled(pending, at_start=not self.answer_parts)
        if cut <= 0:
            self.pending = pending
            return
        self.answer_parts.append(pending[:cut])
        self.pending = pending[cut:]
        self.yielded = True
        yield ChatResponse(text=pending[:cut])


def _settled(tail: str, *, at_start: bool) -> int:
    """How much of an answer's unsent tail is final.

    Trailing blanks and a last line that may be (half of) a closing code fence are held back.
    """
    cut = len(tail.rstrip())
    for token in ("<|", "</s>", "<end_of_turn>"):  # a leaked control token: the final read drops it
        at = tail.find(token, 0, cut)
        if at >= 0:
            cut = at
    lt = tail.rfind("<", max(0, cut - 16), cut)
    if lt >= 0 and ">" not in tail[lt:cut]:
        cut = lt  # maybe the first half of one
    cut = len(tail[:cut].rstrip())
    nl = tail.rfind("\n", 0, cut)
    if nl >= 0 or at_start:
        last = tail[nl + 1 : cut].strip()
        if last and set(last) <= {"`", "~"}:
            cut = len(tail[: max(nl, 0)].rstrip())
    return cut


class TextProtocolModel(ChatModel):
    """Tool calling through the ReAct text protocol, for models without native tool calling.

    With tools, the system prompt gains the tool list and the format; the inner model is called
    with ``tools=[]`` and its text reply becomes thinking (the Thought), tool-call chunks (each
    Action, arguments already parsed) or text (the Final Answer), ending with a finish reason.
    History is converted for it: tool calls become ``Action`` / ``Action Input`` text and tool
    results ``Observation`` text. A reply that cannot be read is sent back with a short
    correction, at most `max_format_retries` times; then its text is taken as the final answer.
    Without tools (and no tool blocks in the history) calls pass straight through.

    Capability facts read on the instance (``model.supports_vision``) are the inner model's;
    ``supports_native_tools`` is True, since this wrapper provides tool calling. ``provider``,
    ``model_name`` and ``options`` are the inner model's; `aclose` closes it.

    Args:
        inner: The text-only (or any) chat model.
        max_format_retries: Correction rounds for an unreadable reply (0 disables them).
        stop_at_observation: Ask the inner model to stop at ``Observation:`` (a stop sequence),
            so it does not imagine tool results. Turn off for endpoints that reject ``stop``.
        stream_final_answer: Stream the final answer as it arrives once the reply is sure to be
            one; otherwise it arrives in one piece when the reply is complete.
        template: Replaces the protocol text (see `render_tool_prompt`).
    """

    supports_native_tools = True
    tools_via_text = True
    """Tool calls are emulated in text: structured output is better asked for in the prompt too."""

    def __init__(
        self,
        inner: ChatModel,
        *,
        max_format_retries: int = 2,
        stop_at_observation: bool = True,
        stream_final_answer: bool = True,
        template: str | None = None,
    ) -> None:
        if not isinstance(inner, ChatModel):
            raise UserError(f"TextProtocolModel wraps a ChatModel, not {type(inner).__name__!r}")
        if not isinstance(max_format_retries, int) or max_format_retries < 0:
            raise UserError(f"max_format_retries must be a non-negative integer, not {max_format_retries!r}")
        self.inner = inner
        self.max_format_retries = max_format_retries
        self.stop_at_observation = stop_at_observation
        self.stream_final_answer = stream_final_answer
        self.template = template
        self.model_name = inner.model_name
        self.options = inner.options
        # Instance-level facts mirror the inner model (class attributes stay the conservative defaults).
        vars(self).update(
            provider=inner.provider,
            supports_structured_output=inner.supports_structured_output,
            supports_vision=inner.supports_vision,
            supports_thinking=inner.supports_thinking,
        )
        self._prompt_key: tuple[Any, ...] | None = None
        self._prompt_text = ""
        self._converted: dict[int, tuple[Msg, Msg]] = {}

    @property
    def price_provider(self) -> str | None:  # type: ignore[override]
        return self.inner.price_provider

    @property
    def price(self) -> ModelPrice | None:
        own: ModelPrice | None = self.__dict__.get("_price")
        return own if own is not None else self.inner.price

    @price.setter
    def price(self, price: ModelPrice | None) -> None:
        self.__dict__["_price"] = price

    # -- prompt ------------------------------------------------------------------------------------
    def _protocol_text(self, tools: Sequence[ToolSchema], options: GenerateOptions) -> str:
        choice = options.tool_choice
        key = (tuple(tools), _freeze(choice), options.parallel_tool_calls)
        cached = self._prompt_key
        if (
            cached is not None
            and cached[1:] == key[1:]
            and len(cached[0]) == len(key[0])
            and all(a is b for a, b in zip(cached[0], key[0], strict=True))
        ):
            return self._prompt_text
        text = render_tool_prompt(
            tools, tool_choice=choice, parallel_tool_calls=options.parallel_tool_calls, template=self.template
        )
        self._prompt_key = key
        self._prompt_text = text
        return text

    def _convert(self, msg: Msg) -> Msg:
        if not _needs_conversion(msg):
            return msg
        hit = self._converted.get(id(msg))
        if hit is not None and hit[0] is msg:
            return hit[1]
        out = _convert_assistant(msg) if msg.role == "assistant" else _convert_user(msg)
        if len(self._converted) >= 4096:
            self._converted.clear()
        self._converted[id(msg)] = (msg, out)
        return out

    def build_prompt(
        self, messages: Sequence[Msg], tools: Sequence[ToolSchema], options: GenerateOptions | None = None
    ) -> list[Msg]:
        """The messages the inner model receives: converted history, protocol in the system prompt."""
        opts = options or self.inner.options
        converted = [self._convert(m) for m in messages]
        if not tools:
            return converted
        protocol = self._protocol_text(tools, opts)
        for i, msg in enumerate(converted):
            if msg.role == "system":
                base = msg.text.rstrip()
                text = f"{base}\n\n{protocol}" if base else protocol
                others = [b for b in msg.content if not isinstance(b, TextBlock)]
                converted[i] = msg.replace(content=[TextBlock(text=text), *others])
                return converted
        return [Msg.system(protocol), *converted]

    def _inner_options(self, options: GenerateOptions | None) -> GenerateOptions:
        opts = self.inner.options.merge(options)
        changes: dict[str, Any] = {}
        if opts.tool_choice is not None:
            changes["tool_choice"] = None
        if opts.parallel_tool_calls is not None:
            changes["parallel_tool_calls"] = None
        if self.stop_at_observation:
            stop = list(opts.stop or ())
            if "\nObservation:" not in stop and len(stop) < 4:  # OpenAI accepts at most 4
                changes["stop"] = [*stop, "\nObservation:"]
        return replace(opts, **changes) if changes else opts

    # -- the model ---------------------------------------------------------------------------------
    async def stream(
        self, messages: Sequence[Msg], tools: Sequence[ToolSchema] = (), options: GenerateOptions | None = None
    ) -> AsyncIterator[ChatResponse]:
        """Stream the inner model's reply, read as the text protocol."""
        if not tools and not _has_tool_blocks(messages):
            async for chunk in self.inner.stream(messages, (), options):
                yield chunk
            return
        opts = self.inner.options.merge(options)
        index = {t.name: t for t in tools}
        prompt = self.build_prompt(messages, tools, opts)
        inner_opts = self._inner_options(options)
        total: TokenUsage | None = None
        pending_restart = False
        attempt_no = 0
        choice = opts.tool_choice
        # A reply that must call a tool is not streamed as an answer: it may have to be asked again.
        stream_answer = self.stream_final_answer and (choice is None or choice in ("auto", "none"))
        while True:
            if pending_restart:
                yield ChatResponse(restart="text protocol: the reply did not follow the format and was asked again")
            state = _Attempt(index, stream_answer)
            async for chunk in self.inner.stream(prompt, [], inner_opts):
                for out in state.feed(chunk):
                    yield out
            if state.usage is not None:
                total = state.usage if total is None else total + state.usage
            text = state.text
            parsed = parse_react(text, index)
            problem = parsed.error or _choice_problem(parsed, choice)
            if problem is None or not text.strip() or attempt_no >= self.max_format_retries:
                for out in self._emit(state, parsed, opts):
                    yield out
                if total is not None:
                    yield ChatResponse(usage=total)
                yield ChatResponse(finish_reason=self._finish_reason(state, parsed))
                return
            attempt_no += 1
            logger.debug("text protocol: unusable reply (%s); asking again (%d)", problem, attempt_no)
            correction = CORRECTION.format(error=problem, tool_names=", ".join(list(index)[:30]) or "none")
            prompt = [*prompt, Msg.assistant(text), Msg.user(correction)]
            pending_restart = state.yielded

    def _finish_reason(self, state: _Attempt, parsed: ReactParse) -> str:
        if (parsed.error is None and parsed.actions) or state.calls:
            return "tool_calls"
        if state.finish_reason in ("length", "content_filter"):
            return state.finish_reason
        return "stop"

    def _emit(self, state: _Attempt, parsed: ReactParse, options: GenerateOptions) -> Iterator[ChatResponse]:
        if parsed.error is not None:
            if state.text.strip():
                logger.warning(
                    "text protocol: model %r did not follow the format (%s); using its reply as the answer",
                    self.model_name,
                    parsed.error,
                )
            parsed = _fallback(state.text, parsed)
        if state.mode == "answer":
            if (
                parsed.final_answer is not None
                and parsed.thought == state.emitted_thought
                and parsed.final_answer.startswith(state.emitted_answer)
            ):
                rest = parsed.final_answer[len(state.emitted_answer) :]
                if rest:
                    yield ChatResponse(text=rest)
                yield from _foreign_calls(state, 0)
                return
            # The streamed guess was wrong (rare): start the reply over with the definitive read.
            yield ChatResponse(restart="text protocol: the streamed answer was re-read")
            yield from state.inner_thinking
        if parsed.thought:
            yield ChatResponse(thinking=parsed.thought)
        actions = parsed.actions
        if actions and options.parallel_tool_calls is False:
            actions = actions[:1]
        if actions:
            yield ChatResponse(
                tool_calls=[
                    ToolCallChunk(index=i, id=_new_call_id(), name=name, input=args)
                    for i, (name, args) in enumerate(actions)
                ]
            )
        elif parsed.final_answer:
            yield ChatResponse(text=parsed.final_answer)
        yield from _foreign_calls(state, len(actions))

    async def aclose(self) -> None:
        """Close the inner model."""
        await self.inner.aclose()

    def __repr__(self) -> str:
        return f"TextProtocolModel({self.inner!r})"


def _choice_problem(parsed: ReactParse, choice: str | Mapping[str, Any] | None) -> str | None:
    """Why a readable reply breaks the `tool_choice` it was given, if it does."""
    if choice == "none" and parsed.actions:
        return "no tool may be called in this reply, so give your Final Answer"
    if choice == "required" and not parsed.actions:
        return "this reply must call a tool"
    if isinstance(choice, Mapping) and choice.get("name"):
        name = choice["name"]
        if not any(n == name for n, _ in parsed.actions):
            return f"this reply must call the tool {name}"
    return None


def _foreign_calls(state: _Attempt, offset: int) -> Iterator[ChatResponse]:
    # Native tool calls from the inner model (it was given no tools, but some models call anyway).
    if state.calls:
        yield ChatResponse(tool_calls=[replace(c, index=c.index + offset) for c in state.calls])


def _fallback(text: str, parsed: ReactParse) -> ReactParse:
    """After the last correction round: the reply's text becomes the answer."""
    if not text.strip():
        return ReactParse(thought=parsed.thought)
    if parsed.error == _NO_DECISION and parsed.thought:
        return ReactParse(final_answer=parsed.thought)
    reasoning, body = _split_reasoning(_strip_control_tokens(text.replace("\r\n", "\n")))
    return ReactParse(thought=reasoning, final_answer=_clean_answer(_unwrap_fence(body)))


def _freeze(value: Any) -> Any:
    if isinstance(value, Mapping):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    return value


def ensure_tool_calling(model: ChatModel, mode: ToolCallingMode = "auto") -> ChatModel:
    """The model, wrapped in `TextProtocolModel` when tool calls must go through text.

    ``"native"`` returns the model as it is; ``"text"`` always wraps (unless already wrapped);
    ``"auto"`` wraps when the model says it has no native tool calling.
    """
    if mode == "native":
        return model
    if mode == "text":
        return model if isinstance(model, TextProtocolModel) else TextProtocolModel(model)
    if mode == "auto":
        if isinstance(model, TextProtocolModel) or model.supports_native_tools:
            return model
        return TextProtocolModel(model)
    raise UserError(f"tool_calling must be 'native', 'text' or 'auto', not {mode!r}")
