"""The text tool protocol: tool calling for chat models that have none.

`TextProtocolModel` wraps any `ChatModel`. When tools are offered it describes them, with the
ReAct format (``Thought`` / ``Action`` / ``Action Input`` / ``Final Answer``), in the system
prompt, asks the inner model for plain text, and turns the reply back into the chunks a model
with native tool calling streams: the thought as thinking, each action as a tool call, the final
answer as text. History is converted the other way, so the inner model reads its earlier tool
calls as ``Action`` lines and their results as ``Observation`` lines.

`parse_react` is the tolerant parser behind it. Real models drift from any format, so it accepts
chatter before the first label, labels on one line, numbered or bold labels, Chinese labels and
full-width colons, JSON with comments, trailing commas, single or curly quotes, code fences, a
missing or bare-string ``Action Input``, LangChain-style JSON blobs, ``<tool_call>`` tags,
``<think>`` reasoning, ReAct-paper ``Search[query]`` actions and Python-style ``tool(a=1)`` calls.
It never raises: what it cannot read comes back in `ReactParse.error`, and the wrapper re-asks the
model with a short correction.
"""

from agentrt.model.text_protocol._parser import ReactParse, parse_react
from agentrt.model.text_protocol._prompt import render_tool_prompt
from agentrt.model.text_protocol.model import TextProtocolModel, ToolCallingMode, ensure_tool_calling

__all__ = [
    "ReactParse",
    "TextProtocolModel",
    "ToolCallingMode",
    "ensure_tool_calling",
    "parse_react",
    "render_tool_prompt",
]
