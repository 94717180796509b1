# ruff: noqa: RUF001 - full-width punctuation and curly quotes are what this corpus is about
"""Real-world-style replies to the ReAct text protocol, each with the parse it must give.

The replies imitate what models actually send when asked for Thought / Action / Action Input /
Final Answer: open models served without tool support (Qwen, Llama, DeepSeek, Mistral, GLM),
GPT-3.5-era completions, LangChain agent formats, and Chinese replies. Each sample names the style
it imitates. `TOOLS` is the catalogue the replies were "given".

Expectation keys:
    actions: the (name, arguments) list expected, or absent for none
    final:   the final answer expected, or absent for none
    error:   True when the reply must be reported as unreadable
    thought: the exact thought expected (optional)
    thought_has: a fragment the thought must contain (optional)
"""

from __future__ import annotations

from typing import Any

from agentrt.model.base import ToolSchema


def _schema(props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": required, "additionalProperties": False}


TOOLS = [
    ToolSchema(
        name="get_weather",
        description="Get the current weather for a city.",
        parameters=_schema(
            {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"], "default": "c"}}, ["city"]
        ),
    ),
    ToolSchema(
        name="search", description="Search the web.", parameters=_schema({"query": {"type": "string"}}, ["query"])
    ),
    ToolSchema(
        name="calculator",
        description="Evaluate an arithmetic expression.",
        parameters=_schema({"expression": {"type": "string"}}, ["expression"]),
    ),
    ToolSchema(
        name="send_email",
        description="Send an email.",
        parameters=_schema(
            {"to": {"type": "string"}, "subject": {"type": "string"}, "body": {"type": "string"}},
            ["to", "subject", "body"],
        ),
    ),
    ToolSchema(name="get_time", description="The current time.", parameters=_schema({}, [])),
    ToolSchema(
        name="read_file", description="Read a file.", parameters=_schema({"path": {"type": "string"}}, ["path"])
    ),
    ToolSchema(
        name="mcp__github__list_issues",
        description="List issues of a repository.",
        parameters=_schema({"repo": {"type": "string"}, "state": {"type": "string"}}, ["repo"]),
    ),
]

W = "get_weather"

CORPUS: list[dict[str, Any]] = [
    # ---------------------------------------------------------------- the canonical format
    {
        "id": "canonical-action",
        "style": "GPT-3.5 / LangChain zero-shot agent",
        "text": 'Thought: I need the weather in Paris.\nAction: get_weather\nAction Input: {"city": "Paris"}',
        "actions": [(W, {"city": "Paris"})],
        "thought": "I need the weather in Paris.",
    },
    {
        "id": "canonical-final",
        "style": "GPT-3.5 / LangChain zero-shot agent",
        "text": "Thought: I now know the final answer.\nFinal Answer: It is 22 °C and sunny in Paris.",
        "final": "It is 22 °C and sunny in Paris.",
        "thought": "I now know the final answer.",
    },
    {
        "id": "plain-text-no-markers",
        "style": "small model ignoring the format",
        "text": "Hello! I'm doing well, thanks for asking. How can I help you today?",
        "final": "Hello! I'm doing well, thanks for asking. How can I help you today?",
    },
    # ---------------------------------------------------------------- prefix chatter, layout
    {
        "id": "prefix-chatter",
        "style": "Llama-3-8B-Instruct",
        "text": (
            "Sure! I'd be happy to help you with that.\n\n"
            "Thought: The user wants the weather in Tokyo, so I should call the weather tool.\n"
            "Action: get_weather\n"
            'Action Input: {"city": "Tokyo"}'
        ),
        "actions": [(W, {"city": "Tokyo"})],
        "thought_has": "weather tool",
    },
    {
        "id": "all-on-one-line",
        "style": "Qwen1.5-7B-Chat",
        "text": 'Thought: I should search for this. Action: search Action Input: {"query": "python 3.13 release date"}',
        "actions": [("search", {"query": "python 3.13 release date"})],
        "thought": "I should search for this.",
    },
    {
        "id": "action-on-thought-line-comma",
        "style": "Mistral-7B-Instruct",
        "text": 'Thought: let me compute it, Action: calculator, Action Input: {"expression": "17*23"}',
        "actions": [("calculator", {"expression": "17*23"})],
    },
    {
        "id": "bold-markdown-labels",
        "style": "GPT-4o-mini in markdown mood",
        "text": (
            "**Thought:** I need to look up the file first.\n\n"
            "**Action:** read_file\n\n"
            '**Action Input:** {"path": "README.md"}'
        ),
        "actions": [("read_file", {"path": "README.md"})],
        "thought": "I need to look up the file first.",
    },
    {
        "id": "bold-label-colon-outside",
        "style": "Gemma-2-9B",
        "text": "**Thought**: easy one.\n**Final Answer**: 2 + 2 = 4.",
        "final": "2 + 2 = 4.",
    },
    {
        "id": "list-bullets",
        "style": "Phi-3-mini",
        "text": "- Thought: I will check the time.\n- Action: get_time\n- Action Input: {}",
        "actions": [("get_time", {})],
    },
    {
        "id": "whole-reply-in-fence",
        "style": "CodeLlama-13B-Instruct",
        "text": '```\nThought: I need the weather.\nAction: get_weather\nAction Input: {"city": "Berlin"}\n```',
        "actions": [(W, {"city": "Berlin"})],
    },
    {
        "id": "whole-reply-in-fence-final",
        "style": "CodeLlama-13B-Instruct",
        "text": "```text\nThought: Done.\nFinal Answer: The file has 12 lines.\n```",
        "final": "The file has 12 lines.",
    },
    {
        "id": "crlf-line-endings",
        "style": "a Windows-hosted llama.cpp server",
        "text": "Thought: time check\r\nAction: get_time\r\nAction Input: {}\r\n",
        "actions": [("get_time", {})],
    },
    # ---------------------------------------------------------------- case and label variants
    {
        "id": "upper-case-labels",
        "style": "Vicuna-13B",
        "text": 'THOUGHT: search it\nACTION: search\nACTION INPUT: {"query": "vicuna benchmark"}',
        "actions": [("search", {"query": "vicuna benchmark"})],
    },
    {
        "id": "lower-case-labels-and-tool",
        "style": "OpenHermes-2.5",
        "text": 'thought: weather please\naction: Get_Weather\naction input: {"city": "Oslo"}',
        "actions": [(W, {"city": "Oslo"})],
    },
    {
        "id": "action-input-underscore",
        "style": "StarChat",
        "text": 'Thought: go\nAction: search\nAction_Input: {"query": "starcoder"}',
        "actions": [("search", {"query": "starcoder"})],
    },
    {
        "id": "final-answer-lower",
        "style": "Llama-2-13B-chat",
        "text": "Thought: I know this.\nFinal answer: Canberra is the capital of Australia.",
        "final": "Canberra is the capital of Australia.",
    },
    {
        "id": "finish-label",
        "style": "AutoGPT-style prompt",
        "text": "Thought: The task is complete.\nFINISH: The email was sent to Bob.",
        "final": "The email was sent to Bob.",
    },
    {
        "id": "numbered-react-paper",
        "style": "ReAct paper (HotpotQA prompt) on text-davinci-002",
        "text": "Thought 1: I need to search Apple Remote and find the program it was designed for.\n"
        "Action 1: Search[Apple Remote]",
        "actions": [("search", {"query": "Apple Remote"})],
    },
    {
        "id": "react-paper-finish",
        "style": "ReAct paper (HotpotQA prompt) on text-davinci-002",
        "text": (
            "Thought 3: Front Row is controlled by the keyboard function keys.\n"
            "Action 3: Finish[keyboard function keys]"
        ),
        "final": "keyboard function keys",
    },
    # ---------------------------------------------------------------- JSON damage
    {
        "id": "json-line-comments",
        "style": "DeepSeek-Coder-6.7B",
        "text": (
            "Thought: convert the temperature\nAction: get_weather\nAction Input: {\n"
            '  "city": "Madrid", // the city\n  "unit": "f" // fahrenheit please\n}'
        ),
        "actions": [(W, {"city": "Madrid", "unit": "f"})],
    },
    {
        "id": "json-block-comment-trailing-comma",
        "style": "Mixtral-8x7B-Instruct",
        "text": 'Thought: x\nAction: get_weather\nAction Input: {"city": "Rome", /* capital */ "unit": "c",}',
        "actions": [(W, {"city": "Rome", "unit": "c"})],
    },
    {
        "id": "json-single-quotes",
        "style": "GPT-3.5-turbo-instruct",
        "text": "Thought: search\nAction: search\nAction Input: {'query': 'best pizza in Naples'}",
        "actions": [("search", {"query": "best pizza in Naples"})],
    },
    {
        "id": "json-python-literals",
        "style": "Falcon-40B-Instruct",
        "text": "Thought: list open issues\nAction: mcp__github__list_issues\n"
        "Action Input: {'repo': 'acme/app', 'state': None}",
        "actions": [("mcp__github__list_issues", {"repo": "acme/app", "state": None})],
    },
    {
        "id": "json-curly-quotes",
        "style": "ChatGLM3-6B",
        "text": "Thought: check weather\nAction: get_weather\nAction Input: {“city”: “Shanghai”}",
        "actions": [(W, {"city": "Shanghai"})],
    },
    {
        "id": "json-in-fence",
        "style": "Qwen2-7B-Instruct",
        "text": (
            'Thought: I will search.\nAction: search\nAction Input:\n```json\n{\n  "query": "qwen2 release"\n}\n```'
        ),
        "actions": [("search", {"query": "qwen2 release"})],
    },
    {
        "id": "json-in-inline-backticks",
        "style": "Llama-3.1-8B-Instruct",
        "text": 'Thought: time\nAction: `calculator`\nAction Input: `{"expression": "2**10"}`',
        "actions": [("calculator", {"expression": "2**10"})],
    },
    {
        "id": "json-unclosed",
        "style": "a reply cut by max_tokens",
        "text": 'Thought: search\nAction: search\nAction Input: {"query": "long query that got cut',
        "actions": [("search", {"query": "long query that got cut"})],
    },
    {
        "id": "json-double-encoded",
        "style": "GPT-3.5-turbo-0301",
        "text": 'Thought: x\nAction: read_file\nAction Input: "{\\"path\\": \\"/etc/hosts\\"}"',
        "actions": [("read_file", {"path": "/etc/hosts"})],
    },
    {
        "id": "text-after-json",
        "style": "Mistral-7B-Instruct-v0.2",
        "text": (
            "Thought: I'll look it up.\nAction: search\n"
            'Action Input: {"query": "mistral 7b context length"} (I will wait for the results before answering.)'
        ),
        "actions": [("search", {"query": "mistral 7b context length"})],
    },
    {
        "id": "label-inside-json-string",
        "style": "GPT-3.5-turbo",
        "text": 'Thought: search the phrase\nAction: search\nAction Input: {"query": "what does Final Answer: mean"}',
        "actions": [("search", {"query": "what does Final Answer: mean"})],
    },
    # ---------------------------------------------------------------- missing / bare input
    {
        "id": "missing-action-input",
        "style": "TinyLlama-1.1B-Chat",
        "text": "Thought: what time is it?\nAction: get_time",
        "actions": [("get_time", {})],
    },
    {
        "id": "bare-string-input",
        "style": "LangChain zero-shot agent on text-davinci-003",
        "text": "Thought: I should search.\nAction: search\nAction Input: latest news about SpaceX Starship",
        "actions": [("search", {"query": "latest news about SpaceX Starship"})],
    },
    {
        "id": "quoted-bare-string-input",
        "style": "Llama-2-70B-chat",
        "text": 'Thought: calc\nAction: calculator\nAction Input: "3 * (4 + 5)"',
        "actions": [("calculator", {"expression": "3 * (4 + 5)"})],
    },
    {
        "id": "bare-string-for-weather-one-required",
        "style": "Yi-34B-Chat",
        "text": "Thought: need weather\nAction: get_weather\nAction Input: London",
        "actions": [(W, {"city": "London"})],
    },
    {
        "id": "input-none",
        "style": "Zephyr-7B-beta",
        "text": "Thought: I need the time.\nAction: get_time\nAction Input: None",
        "actions": [("get_time", {})],
    },
    {
        "id": "json-on-next-line-without-label",
        "style": "Llama-3-70B-Instruct",
        "text": 'Thought: weather\nAction: get_weather\n{"city": "Lisbon"}',
        "actions": [(W, {"city": "Lisbon"})],
    },
    {
        "id": "inline-json-after-name",
        "style": "WizardLM-2",
        "text": 'Thought: go\nAction: get_weather {"city": "Dublin"}',
        "actions": [(W, {"city": "Dublin"})],
    },
    {
        "id": "python-call-style",
        "style": "Llama-3.2-3B (pythonic tool calls)",
        "text": 'Thought: I need the weather.\nAction: get_weather(city="Kyoto", unit="c")',
        "actions": [(W, {"city": "Kyoto", "unit": "c"})],
    },
    # ---------------------------------------------------------------- several actions
    {
        "id": "two-parallel-actions",
        "style": "Qwen2.5-14B-Instruct",
        "text": (
            "Thought: I need the weather in both cities.\n"
            'Action: get_weather\nAction Input: {"city": "Paris"}\n'
            'Action: get_weather\nAction Input: {"city": "Rome"}'
        ),
        "actions": [(W, {"city": "Paris"}), (W, {"city": "Rome"})],
    },
    {
        "id": "numbered-parallel-actions",
        "style": "DeepSeek-V2-Lite-Chat",
        "text": (
            "Thought: two lookups.\n"
            'Action 1: search\nAction Input 1: {"query": "GDP France"}\n'
            'Action 2: search\nAction Input 2: {"query": "GDP Germany"}'
        ),
        "actions": [("search", {"query": "GDP France"}), ("search", {"query": "GDP Germany"})],
    },
    {
        "id": "hallucinated-observation",
        "style": "Llama-2-7B-chat (runs on past the stop word)",
        "text": (
            'Thought: I should check.\nAction: get_weather\nAction Input: {"city": "Paris"}\n'
            "Observation: It is sunny and 25 degrees.\nThought: I now know the final answer.\n"
            "Final Answer: It is sunny and 25 degrees in Paris."
        ),
        "actions": [(W, {"city": "Paris"})],
    },
    {
        "id": "action-then-final-no-observation",
        "style": "Mistral-7B-Instruct-v0.1",
        "text": 'Thought: search\nAction: search\nAction Input: {"query": "x"}\nFinal Answer: I searched for x.',
        "actions": [("search", {"query": "x"})],
    },
    # ---------------------------------------------------------------- answers and non-actions
    {
        "id": "action-none-then-final",
        "style": "Orca-2-13B",
        "text": "Thought: No tool is needed.\nAction: None\nAction Input: None\nFinal Answer: Hello there!",
        "final": "Hello there!",
    },
    {
        "id": "action-final-answer-langchain",
        "style": "LangChain structured-chat on Llama-2",
        "text": 'Thought: I know it now.\nAction: Final Answer\nAction Input: "The meeting is at 3 pm."',
        "final": "The meeting is at 3 pm.",
    },
    {
        "id": "action-final-answer-with-colon",
        "style": "Llama-3-8B-Instruct merging the two labels",
        "text": "Thought: I know this one.\nAction: Final Answer: The Eiffel Tower is 330 m tall.",
        "final": "The Eiffel Tower is 330 m tall.",
    },
    {
        "id": "final-answer-multiline-with-code",
        "style": "DeepSeek-Coder-33B-Instruct",
        "text": (
            "Thought: I can write this directly.\nFinal Answer: Use a list comprehension:\n\n"
            "```python\nsquares = [x * x for x in range(10)]\n```\n\nThis builds the list in one line."
        ),
        "final": (
            "Use a list comprehension:\n\n```python\nsquares = [x * x for x in range(10)]\n```\n\n"
            "This builds the list in one line."
        ),
    },
    {
        "id": "final-answer-mentions-action",
        "style": "GPT-3.5-turbo explaining the protocol",
        "text": "Thought: explain.\nFinal Answer: You write `Action: tool_name` and then an Action Input line.",
        "final": "You write `Action: tool_name` and then an Action Input line.",
    },
    {
        "id": "think-tags-then-answer",
        "style": "DeepSeek-R1-Distill-Qwen-7B",
        "text": "<think>\nThe user says hi. No tool is needed.\n</think>\n\nHi! How can I help you today?",
        "final": "Hi! How can I help you today?",
        "thought": "The user says hi. No tool is needed.",
    },
    {
        "id": "think-close-only",
        "style": "DeepSeek-R1 behind a server that strips <think>",
        "text": 'Okay, I should look up the weather.\n</think>\n\nAction: get_weather\nAction Input: {"city": "Seoul"}',
        "actions": [(W, {"city": "Seoul"})],
        "thought_has": "look up the weather",
    },
    {
        "id": "think-tags-then-react",
        "style": "QwQ-32B",
        "text": (
            "<think>I need two facts. First the weather.</think>\n"
            'Thought: call the tool\nAction: get_weather\nAction Input: {"city": "Hangzhou"}'
        ),
        "actions": [(W, {"city": "Hangzhou"})],
        "thought": "I need two facts. First the weather.\ncall the tool",
    },
    # ---------------------------------------------------------------- other tool-call dialects
    {
        "id": "langchain-json-blob",
        "style": "LangChain structured-chat agent (Mixtral)",
        "text": (
            "Thought: I should search.\nAction:\n```\n"
            '{\n  "action": "search",\n  "action_input": {"query": "mixtral moe"}\n}\n```'
        ),
        "actions": [("search", {"query": "mixtral moe"})],
    },
    {
        "id": "langchain-json-blob-final",
        "style": "LangChain JSON chat agent (GPT-3.5)",
        "text": (
            '```json\n{\n    "action": "Final Answer",\n    "action_input": "Paris is the capital of France."\n}\n```'
        ),
        "final": "Paris is the capital of France.",
    },
    {
        "id": "hermes-tool-call-tags",
        "style": "Qwen2.5-7B-Instruct served without tool parsing (Hermes template)",
        "text": (
            "I'll check both.\n<tool_call>\n"
            '{"name": "get_weather", "arguments": {"city": "Beijing"}}\n</tool_call>\n<tool_call>\n'
            '{"name": "get_weather", "arguments": {"city": "Shenzhen"}}\n</tool_call>'
        ),
        "actions": [(W, {"city": "Beijing"}), (W, {"city": "Shenzhen"})],
        "thought": "I'll check both.",
    },
    {
        "id": "llama31-function-tag",
        "style": "Llama-3.1-70B custom tool format",
        "text": '<function=search>{"query": "llama 3.1 405b"}</function>',
        "actions": [("search", {"query": "llama 3.1 405b"})],
    },
    {
        "id": "mistral-tool-calls-token",
        "style": "Mistral-7B-Instruct-v0.3 behind a server without its tool parser",
        "text": '[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Marseille"}}]',
        "actions": [(W, {"city": "Marseille"})],
    },
    {
        "id": "llama31-python-tag",
        "style": "Llama-3.1-8B-Instruct with the tool template but no parser",
        "text": '<|python_tag|>{"name": "search", "parameters": {"query": "ollama tool support"}}<|eom_id|>',
        "actions": [("search", {"query": "ollama tool support"})],
    },
    {
        "id": "chatml-end-token-leak",
        "style": "Qwen1.5 via a server with a wrong stop token",
        "text": "Thought: simple.\nFinal Answer: 42 is the answer.<|im_end|>\n<|im_start|>user",
        "final": "42 is the answer.",
    },
    {
        "id": "qwen-agent-function-markers",
        "style": "Qwen-Agent ✿FUNCTION✿ format",
        "text": '✿FUNCTION✿: get_weather\n✿ARGS✿: {"city": "Chengdu"}',
        "actions": [(W, {"city": "Chengdu"})],
    },
    {
        "id": "bare-json-blob-name-arguments",
        "style": "Llama-3.1-8B zero-shot JSON tool call",
        "text": '{"name": "calculator", "parameters": {"expression": "sqrt(2)"}}',
        "actions": [("calculator", {"expression": "sqrt(2)"})],
    },
    {
        "id": "json-answer-not-a-call",
        "style": "GPT-3.5 answering with JSON data",
        "text": '{"name": "Alice", "age": 30}',
        "final": '{"name": "Alice", "age": 30}',
    },
    # ---------------------------------------------------------------- Chinese replies
    {
        "id": "zh-labels-fullwidth",
        "style": "Qwen-7B-Chat (Chinese ReAct prompt)",
        "text": "思考：用户想知道北京的天气，我需要调用天气工具。\n行动：get_weather\n行动输入：{“city”：“北京”}",
        "actions": [(W, {"city": "北京"})],
        "thought": "用户想知道北京的天气，我需要调用天气工具。",
    },
    {
        "id": "zh-final-answer",
        "style": "ChatGLM3-6B",
        "text": "思考：我已经知道答案了。\n最终答案：北京今天晴，气温 25 摄氏度。",
        "final": "北京今天晴，气温 25 摄氏度。",
    },
    {
        "id": "zh-answer-short-label",
        "style": "Baichuan2-13B-Chat",
        "text": "答案：上海的人口约为 2487 万。",
        "final": "上海的人口约为 2487 万。",
    },
    {
        "id": "zh-english-labels-fullwidth-colon",
        "style": "Qwen1.5-14B-Chat",
        "text": 'Thought：我需要搜索一下。\nAction：search\nAction Input：{"query": "杭州 亚运会 金牌榜"}',
        "actions": [("search", {"query": "杭州 亚运会 金牌榜"})],
    },
    {
        "id": "zh-fullwidth-json-punctuation",
        "style": "InternLM2-Chat-7B",
        "text": "Thought: 查天气\nAction: get_weather\nAction Input: {“city”：“广州”，“unit”：“c”}",
        "actions": [(W, {"city": "广州", "unit": "c"})],
    },
    {
        "id": "zh-prefix-chatter-then-labels",
        "style": "Yi-6B-Chat",
        "text": '好的，我来帮你查询。\nThought: 需要读取文件\nAction: read_file\nAction Input: {"path": "报告.txt"}',
        "actions": [("read_file", {"path": "报告.txt"})],
        "thought_has": "好的",
    },
    {
        "id": "zh-plain-answer",
        "style": "Qwen2-1.5B-Instruct ignoring the format",
        "text": "你好！我是一个人工智能助手，有什么可以帮你的吗？",
        "final": "你好！我是一个人工智能助手，有什么可以帮你的吗？",
    },
    {
        "id": "zh-inline-labels",
        "style": "DeepSeek-LLM-7B-Chat",
        "text": '思考：先算一下。行动：calculator 行动输入：{"expression": "365*24"}',
        "actions": [("calculator", {"expression": "365*24"})],
    },
    # ---------------------------------------------------------------- unknown tools and errors
    {
        "id": "unknown-tool-kept",
        "style": "Llama-3-8B inventing a tool",
        "text": 'Thought: I will use the browser.\nAction: open_browser\nAction Input: {"url": "https://example.com"}',
        "actions": [("open_browser", {"url": "https://example.com"})],
    },
    {
        "id": "multi-param-tool",
        "style": "GPT-3.5-turbo",
        "text": (
            "Thought: send it\nAction: send_email\n"
            'Action Input: {"to": "bob@example.com", "subject": "Hi", "body": "See you at 5."}'
        ),
        "actions": [("send_email", {"to": "bob@example.com", "subject": "Hi", "body": "See you at 5."})],
    },
    {
        "id": "error-garbage-action",
        "style": "a 1B model losing the plot",
        "text": "Thought: hmm\nAction: ??? ### !!!\nAction Input: ][",
        "error": True,
    },
    {
        "id": "error-sentence-as-action",
        "style": "Llama-2-7B-chat",
        "text": "Thought: I should look this up.\nAction: I will look up the answer on the internet for you.",
        "error": True,
    },
    {
        "id": "error-thought-only",
        "style": "Vicuna-7B stopping early",
        "text": "Thought: I need to find out the population of Lyon first.",
        "error": True,
        "thought": "I need to find out the population of Lyon first.",
    },
    {
        "id": "error-bare-string-multi-param",
        "style": "Mistral-7B-Instruct",
        "text": "Thought: send\nAction: send_email\nAction Input: bob@example.com",
        "error": True,
    },
    {
        "id": "error-input-without-action",
        "style": "StableLM-Zephyr-3B",
        "text": 'Thought: go\nAction Input: {"query": "x"}',
        "error": True,
    },
    {
        "id": "error-broken-json-input",
        "style": "Phi-2",
        "text": "Thought: x\nAction: search\nAction Input: {]]]]",
        "error": True,
    },
    {
        "id": "tool-named-in-sentence",
        "style": "Llama-2-13B-chat",
        "text": 'Thought: weather\nAction: I will use the `get_weather` tool\nAction Input: {"city": "Nice"}',
        "actions": [(W, {"city": "Nice"})],
    },
    {
        "id": "bracketed-tool-name",
        "style": "GPT-3.5 copying the prompt's [tool names] list",
        "text": 'Thought: search it\nAction: [search]\nAction Input: {"query": "bracket"}',
        "actions": [("search", {"query": "bracket"})],
    },
    {
        "id": "empty-reply",
        "style": "any model hitting a stop word at once",
        "text": "   \n",
        "error": True,
    },
]
