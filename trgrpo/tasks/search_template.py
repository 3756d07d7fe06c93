"""The search task's chat template and response parser for TRL's tool loop: Qwen2.5's template or a compact one,
an unparseable ``<tool_call>`` turned into a call the tool answers with an error, and the parser's hook through which
the search tool queues a round's queries (``expect_tool_calls``, :func:`trgrpo.tasks.search.make_search_tool`)."""

from __future__ import annotations

from typing import Any

SEARCH_TOOL_NAME = "search"
MALFORMED_KEY = "_malformed_call"  # argument under which an unparseable tool call reaches the tool


# Qwen2.5's template with a one-line tool description instead of the JSON schema (~150 fewer prompt tokens).
COMPACT_CHAT_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + messages[0]['content'] }}"
    "{%- else %}{{- '<|im_start|>system\\nYou are a helpful assistant.' }}{%- endif %}"
    "{%- if tools %}{{- '\\nTools:' }}{%- for tool in tools %}{%- set f = tool.function if tool.function is defined "
    "else tool %}{{- ' ' + f.name + '(' + (f.parameters.properties | list | join(', ')) + ')' }}{%- endfor %}"
    '{{- \'. Call one as <tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>\' }}{%- endif %}'
    "{{- '<|im_end|>\\n' }}"
    "{%- for message in messages %}"
    "{%- if (message.role == 'user') or (message.role == 'system' and not loop.first) or "
    "(message.role == 'assistant' and not message.tool_calls) %}"
    "{%- if not (message.role == 'system' and loop.first) %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}{%- endif %}"
    "{%- elif message.role == 'assistant' %}{{- '<|im_start|>' + message.role }}"
    "{%- if message.content %}{{- '\\n' + message.content }}{%- endif %}"
    "{%- for tool_call in message.tool_calls %}{%- if tool_call.function is defined %}"
    "{%- set tool_call = tool_call.function %}{%- endif %}"
    '{{- \'\\n<tool_call>\\n{"name": "\' }}{{- tool_call.name }}{{- \'", "arguments": \' }}'
    "{{- tool_call.arguments | tojson }}{{- '}\\n</tool_call>' }}{%- endfor %}{{- '<|im_end|>\\n' }}"
    "{%- elif message.role == 'tool' %}"
    "{%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != 'tool') %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' }}{{- message.content }}{{- '\\n</tool_response>' }}"
    "{%- if loop.last or (messages[loop.index0 + 1].role != 'tool') %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
TEMPLATES = ("auto", "compact")


def prepare_tokenizer(tokenizer: Any, template: str = "auto") -> Any:
    """The same tokenizer made ready for TRL's tool loop: ``"auto"`` keeps a template that renders tool calls, else
    installs TRL's Qwen2.5 one; ``"compact"`` installs :data:`COMPACT_CHAT_TEMPLATE`. An unparseable ``<tool_call>``
    becomes a call whose tool response is an error (TRL would end the rollout silently)."""
    from trl.chat_template_utils import (
        add_response_schema,
        qwen2_5_chat_template,
        qwen3_template,
        supports_tool_calling,
    )

    if template not in TEMPLATES:
        raise ValueError(f"template must be one of {TEMPLATES}, got {template!r}")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if template == "compact":
        tokenizer.chat_template = COMPACT_CHAT_TEMPLATE
        tokenizer.response_template = qwen3_template  # <tool_call> JSON </tool_call>, content up to <|im_end|>
    elif not supports_tool_calling(tokenizer):
        tokenizer.chat_template = qwen2_5_chat_template
    if getattr(tokenizer, "response_template", None) is None and getattr(tokenizer, "response_schema", None) is None:
        add_response_schema(tokenizer)
    original = tokenizer.parse_response

    def parse_response(response, schema=None, *, prefix=None, tools=None):
        batched = isinstance(response, (list, tuple)) and response and isinstance(response[0], (list, tuple, str))
        if batched or getattr(response, "ndim", 1) > 1:
            return original(response, schema, prefix=prefix, tools=tools)
        try:
            parsed, error = original(response, schema, prefix=prefix, tools=tools), None
        except (ValueError, TypeError) as e:
            parsed, error = None, e
        if isinstance(parsed, dict) and _valid_tool_calls(parsed.get("tool_calls")):
            if (hook := getattr(tokenizer, "expect_tool_calls", None)) is not None and parsed.get("tool_calls"):
                hook(parsed["tool_calls"])  # the search tool queues the round's queries (make_search_tool)
            return parsed
        text = response if isinstance(response, str) else tokenizer.decode(response, skip_special_tokens=True)
        if "<tool_call>" in text:
            before, _, raw = text.partition("<tool_call>")
            raw = raw.split("</tool_call>")[0].strip()
            call = {"type": "function", "function": {"name": SEARCH_TOOL_NAME, "arguments": {MALFORMED_KEY: raw}}}
            return {"role": "assistant", "content": before.strip(), "tool_calls": [call]}
        if error is not None:
            raise error
        return parsed

    tokenizer.parse_response = parse_response
    return tokenizer


def _valid_tool_calls(calls: Any) -> bool:
    if calls is None:
        return True
    if not isinstance(calls, list):
        return False
    for c in calls:
        fn = c.get("function", c) if isinstance(c, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not isinstance(fn.get("arguments"), dict):
            return False
    return True
