"""The ``search`` tool the model calls through TRL's tool loop: a query in, formatted passages out."""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Sequence
from typing import Any

SEARCH_TOOL_NAME = "search"
MALFORMED_KEY = "_malformed_call"  # argument under which an unparseable tool call reaches the tool


# ---------------------------------------------------------------------------------------------------------------
# The search tool (what TRL calls inside its tool loop)


def format_passages(hits: Sequence[dict[str, Any]], *, max_chars: int = 400) -> str:
    """Search-R1's ``_passages2string``: one ``Doc i (Title: ...) text`` line per hit."""
    if not hits:
        return "No results found."
    lines = []
    for i, h in enumerate(hits, 1):
        text = str(h.get("text", ""))
        if len(text) > max_chars:
            text = text[:max_chars].rsplit(" ", 1)[0] + " ..."
        lines.append(f"Doc {i} (Title: {h.get('title', '')}) {text}")
    return "\n".join(lines)


def tool_call_text(query: str) -> str:
    """The text of one search call, exactly as the Qwen2.5 chat template renders it."""
    payload = json.dumps({"query": query}, ensure_ascii=False)
    return f'<tool_call>\n{{"name": "{SEARCH_TOOL_NAME}", "arguments": {payload}}}\n</tool_call>'


def make_search_tool(retriever: Any, *, top_k: int = 3, max_query_chars: int = 300) -> Callable[..., str]:
    """A ``search(query: str) -> str`` tool for ``GRPOTrainer(tools=[...])`` that never raises.

    Wrong or missing arguments and unparseable calls (routed here by :func:`prepare_tokenizer`) get a
    clear ``Error: ...`` message back as the tool response, so the rollout goes on.
    """

    def search(query: str = "", **kwargs) -> str:
        if MALFORMED_KEY in kwargs:
            raw = str(kwargs[MALFORMED_KEY])[:120]
            return (
                f"Error: could not parse the tool call {raw!r}. Call the tool as "
                f"{tool_call_text('your query')!r} (JSON with a name and an arguments object)."
            )
        if kwargs:
            return f"Error: search takes one argument, 'query' (a string); got {sorted(kwargs)}."
        if not isinstance(query, str) or not query.strip():
            return "Error: search needs a non-empty 'query' string."
        try:
            hits = retriever.search(query.strip()[:max_query_chars], top_k)
        except Exception as e:  # the rollout must go on even if a retrieval server fails
            return f"Error: the retriever failed ({type(e).__name__}: {e})."
        return format_passages(hits)

    search.__doc__ = """Search the encyclopedia and return the most relevant passages.

    Args:
        query: the words to search for, e.g. a name
    """
    # The schema TRL shows the model lists `query` only; **kwargs is there to answer bad calls clearly.
    search.__signature__ = inspect.Signature(
        [inspect.Parameter("query", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=str)], return_annotation=str
    )
    search.__name__ = search.__qualname__ = SEARCH_TOOL_NAME
    search.retriever = retriever
    search.top_k = top_k
    return search
