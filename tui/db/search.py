"""What the Database tab's search box means, as SQL.

Users paste what they saw (``What is 78+80?``, ``<answer>``, ``don't``, ``C++``, ``-168``), so plain
text is searched as typed: every whitespace-separated word, or ``"quoted phrase"``, must occur in the
prompt, the completion or the thinking, case-insensitively. Each one is matched in two parts: the
FTS5 index narrows the rows by the word's letters and digits (the word as one quoted FTS5 string,
so no character of it is FTS syntax), and a ``LIKE`` on the row confirms the exact characters
(``78+80`` is not ``78 80``). A word with no letter or digit at all (``*``, ``+``) has nothing the
index knows, and is found by the ``LIKE`` alone.

FTS5's own query language (``a OR b``, ``NOT``, ``pre*``, ``NEAR``, ``completion:word``) is opt-in:
a search that starts with ``fts:`` is passed to FTS5 as written (the help screen says so).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

FTS_PREFIX = "fts:"
_COLUMNS = ("prompt", "completion", "thinking")
_TERMS = re.compile(r'"([^"]*)"|(\S+)')
_GROUP = 30
_INDEXED = re.compile(r"[^\W_]")  # a letter or digit: what FTS5 indexes


@dataclass(frozen=True)
class Search:
    """``match``: an FTS5 MATCH expression (None: the index cannot help); ``like``: the exact terms,
    each of which must occur in one of the text columns."""

    match: str | None
    like: tuple[str, ...]
    operators: bool = False


def parse(text: str) -> Search | None:
    """The search ``text`` asks for; None when it asks for nothing."""
    text = text.strip()
    if not text:
        return None
    if text[: len(FTS_PREFIX)].lower() == FTS_PREFIX:
        raw = text[len(FTS_PREFIX):].strip()
        return Search(raw, (), operators=True) if raw else None
    terms = tuple(t for quoted, word in _TERMS.findall(text) if (t := (quoted or word).strip()) and "\x1f" not in t)
    if not terms:  # only empty quotes
        return None
    indexed = [_quote(t) for t in terms if _INDEXED.search(t)]
    return Search(" ".join(indexed) or None, terms)


def _quote(term: str) -> str:
    """``term`` as one FTS5 string: its tokens as a phrase, nothing in it read as an operator."""
    return '"' + term.replace('"', '""') + '"'


def _like(term: str) -> str:
    return "%" + term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def like_sql(search: Search, alias: str = "g") -> tuple[str, list[str]]:
    """``(sql, params)``: every exact term occurs in one of ``alias``'s text columns ("1" without terms).
    The columns are joined with a character no term holds; the terms go in groups of ``_GROUP``, so
    a pasted page of text stays under SQLite's expression depth limit (1,000)."""
    text = " || char(31) || ".join(f"coalesce({alias}.{c}, '')" for c in _COLUMNS)
    likes = [f"({text}) LIKE ? ESCAPE '\\'" for _ in search.like]
    groups = ["(" + " AND ".join(likes[i : i + _GROUP]) + ")" for i in range(0, len(likes), _GROUP)]
    return (" AND ".join(groups) or "1"), [_like(t) for t in search.like]


def highlight_pattern(text: str) -> str | None:
    """A regex for what to highlight in a shown generation: the exact terms of a plain search, the
    words of an ``fts:`` one (operators and column names dropped; ``pre*`` as a prefix)."""
    search = parse(text)
    if search is None:
        return None
    if not search.operators:
        return "(?:" + "|".join(re.escape(t) for t in search.like) + ")"
    words = [w for w in re.findall(r"(?:\w+:)?(\w+\*?)", search.match or "") if w not in ("AND", "OR", "NOT", "NEAR")]
    if not words:
        return None
    return r"\b(?:" + "|".join(re.escape(w.rstrip("*")) + (r"\w*" if w.endswith("*") else r"\b") for w in words) + ")"
