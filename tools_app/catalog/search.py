"""Search mode: the search tool that stands in for a catalog too large to list, and the ranking
behind it (Okapi BM25 with per-field weights, BM25F-style).

An endpoint in search mode lists the search tool and the tools pinned as always visible;
the search tool ranks the tools the caller may see for a query and returns their
definitions, which the client then calls by name as usual.

Why a small implementation of our own rather than ``rank-bm25`` or ``bm25s``: both need
numpy (not otherwise in the ASGI process); their tokenizers do not split identifiers
(``listRepoIssues``, ``repos_list_for_org``), which are most of what a tool name says; and the
statistics (document frequencies, average length) must be over exactly the tools the caller
may see, so that a tool the caller may not see cannot even shift a ranking. Splitting words is
done once per tool revision (``search_terms_of``); the statistics once per
visible set (``VisibleSet.search_index``), which the catalog cache keeps until the catalog
changes; a query scores only the tools that share a word with it.
"""

from __future__ import annotations

import json
import math
import re
import threading
from collections import Counter, OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tools_app.catalog.schemas import compile_validator, describe_error, first_error

if TYPE_CHECKING:
    from tools_app.catalog.spec import ToolSpec

SEARCH_TOOL_NAME = "search_tools"
DEFAULT_LIMIT = 5
MAX_LIMIT = 25
MAX_QUERY = 500

SEARCH_INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {
            "type": "string",
            "minLength": 1,
            "maxLength": MAX_QUERY,
            "description": "What you want to do, in a few words (e.g. 'add a comment to an issue').",
        },
        "limit": {
            "type": "integer",
            "minimum": 1,
            "maximum": MAX_LIMIT,
            "default": DEFAULT_LIMIT,
            "description": "How many tools to return, best first.",
        },
    },
    "required": ["query"],
    "additionalProperties": False,
}
SEARCH_OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "tools": {
            "type": "array",
            "items": {"type": "object"},
            "description": "Definitions of the best matching tools, as tools/list shows them.",
        }
    },
    "required": ["tools"],
}
SEARCH_TOOL: dict[str, Any] = {
    "name": SEARCH_TOOL_NAME,
    "title": "Search tools",
    "description": (
        "Find the tools for a task. This endpoint has more tools than it lists: describe what you want to do "
        "in a few words and this returns the definitions (name, description, inputSchema) of the best matching "
        "tools. Then call the one you need by its name, as any listed tool."
    ),
    "inputSchema": SEARCH_INPUT_SCHEMA,
    "outputSchema": SEARCH_OUTPUT_SCHEMA,
    "annotations": {"readOnlyHint": True, "destructiveHint": False, "openWorldHint": False},
}
_input_validator = compile_validator(SEARCH_INPUT_SCHEMA)

# How much a word counts by where it stands: a tool's name and title say what it does; argument
# names what it works on; the description says both and much else. Chosen on the 20 queries of
# tests/mcp/github_catalog.py (1,223 GitHub tools); README "Large catalogs" has the hit rates.
NAME_WEIGHT = 3.0
TITLE_WEIGHT = 3.0
ARGUMENT_WEIGHT = 0.5
DESCRIPTION_WEIGHT = 0.5
ARGUMENT_DESCRIPTION_WEIGHT = 0.3
# Okapi BM25's usual term frequency saturation.
K1 = 1.2

# Words (and identifier parts: listRepoIssues -> list, repo, issues; HTTPServer -> http, server).
_WORDS = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")
_STOP = frozenset(
    re.findall(
        r"\w+",
        "a an and are as at be by can did do does for from has have how i in is it its me my of on or that the "
        "this to was we what when which will with you your",
    )
)


def _stem(word: str) -> str:
    """A light suffix stripper, applied alike to tools and queries so that forms of one word
    meet (issues/issue, created/create/creating, repositories/repository). Not a full
    stemmer: it only has to be consistent."""
    if len(word) <= 3:
        return word
    stripped = word
    # (suffix, replacement, the shortest stem it may leave: string, speed and bus stay whole)
    suffixes = (("ies", "y", 2), ("sses", "ss", 2), ("ing", "", 4), ("ed", "", 4), ("s", "", 3))
    for suffix, replacement, shortest in suffixes:
        if word.endswith(suffix) and len(word) - len(suffix) >= shortest:
            if suffix == "s" and word.endswith(("ss", "us", "is")):
                break
            stripped = word[: -len(suffix)] + replacement
            break
    if stripped != word and len(stripped) > 3 and stripped[-1] == stripped[-2] and stripped[-1] not in "lsz":
        stripped = stripped[:-1]  # running -> run, but not passed -> pas
    if len(stripped) > 3 and stripped.endswith("e"):
        stripped = stripped[:-1]  # create, created, creating -> creat
    return stripped


# The short forms API names use, so that "organization" finds ``orgs_list`` (stemmed forms).
_SHORT = {
    "organization": "org",
    "organisation": "org",
    "repository": "repo",
    "configuration": "config",
    "application": "app",
    "authentication": "auth",
    "authorization": "auth",
    "administrator": "admin",
    "environment": "env",
    "directory": "dir",
    "information": "info",
    "parameter": "param",
    "identifier": "id",
    "statistic": "stat",
    "specification": "spec",
}
# What a query's verb may also mean in an API's names (a query word's synonyms count half):
# people add, remove and fetch what APIs create, delete and get.
_ALSO = {
    "add": ("creat",),
    "new": ("creat",),
    "make": ("creat",),
    "publish": ("creat",),
    "creat": ("add",),
    "remov": ("delet",),
    "delet": ("remov",),
    "eras": ("delet",),
    "fetch": ("get",),
    "read": ("get",),
    "show": ("get", "list"),
    "retriev": ("get",),
    "find": ("search", "list"),
    "edit": ("updat",),
    "chang": ("updat", "set"),
    "modify": ("updat",),
}
SYNONYM_WEIGHT = 0.5


def words(text: str) -> list[str]:
    """The searchable words of ``text``: identifiers split, lower case, stop words out, stemmed,
    long forms shortened."""
    found = (match.lower() for match in _WORDS.findall(text))
    stemmed = (_stem(word) for word in found if word not in _STOP)
    return [_SHORT.get(word, word) for word in stemmed]


# Verbs of API operations (stemmed): a query without any that names things in the plural
# ("workflow runs of a repository") asks for a list.
_VERBS = frozenset({*_ALSO, "get", "list", "set", "updat", "check", "search", "merg", "star", "mark", "fork"})
_PLURAL = re.compile(r"[a-z]{2,}[^su]s$")


def query_words(query: str) -> dict[str, float]:
    """Each word of ``query`` once with weight 1, its synonyms (``_ALSO``) at half weight, and
    "list" at half weight when the query names things in the plural and has no verb."""
    weights: dict[str, float] = {}
    for word in words(query):
        weights[word] = 1.0
    for word in list(weights):
        for synonym in _ALSO.get(word, ()):
            weights.setdefault(synonym, SYNONYM_WEIGHT)
    plural = any(_PLURAL.match(word) and word not in _STOP for word in map(str.lower, _WORDS.findall(query)))
    if plural and not _VERBS & set(weights):
        weights.setdefault("list", SYNONYM_WEIGHT)
    return weights


# The fields a tool is searched by, each with its weight and how much its length counts (BM25F's
# b per field): a long name or title is a less exact match, a long description says no less.
FIELDS: tuple[tuple[str, float, float], ...] = (
    ("name", NAME_WEIGHT, 0.75),
    ("title", TITLE_WEIGHT, 0.75),
    ("description", DESCRIPTION_WEIGHT, 0.5),
    ("arguments", ARGUMENT_WEIGHT, 0.5),
    ("argument_descriptions", ARGUMENT_DESCRIPTION_WEIGHT, 0.5),
)


@dataclass(frozen=True)
class SearchTerms:
    """One tool's words: per field (in ``FIELDS`` order) each word's count and the field's length."""

    counts: tuple[dict[str, int], ...]
    lengths: tuple[int, ...]

    @property
    def words(self) -> set[str]:
        return {word for counts in self.counts for word in counts}


def _argument_texts(schema: Any, depth: int = 0) -> Iterable[tuple[str, str]]:
    """(name, description) of each argument, nested objects' properties included (bounded)."""
    if not isinstance(schema, dict) or depth > 3:
        return
    properties = schema.get("properties")
    if not isinstance(properties, dict):
        return
    for name, definition in properties.items():
        description = definition.get("description") if isinstance(definition, dict) else None
        yield str(name), description if isinstance(description, str) else ""
        yield from _argument_texts(definition, depth + 1)


# Each tool's words by (id, revision: its row's version and its curation's), so that a catalog
# reload (any change of the tenant's tools, rules or keys) splits only the tools that changed:
# about 0.4 ms a tool for GitHub's (0.5 s for all 1,223, bench/tool_search_bench.py). Least
# recently used out past MAX_SPLIT_TOOLS.
MAX_SPLIT_TOOLS = 100_000
_terms: OrderedDict[tuple[int, str], SearchTerms] = OrderedDict()
_terms_lock = threading.Lock()  # indexes are built in threads


def forget_split_words() -> None:
    """Empty the words cache (a benchmark timing the splitting)."""
    with _terms_lock:
        _terms.clear()


def search_terms_of(tool: ToolSpec) -> SearchTerms:
    key = (tool.id, tool.revision)
    with _terms_lock:
        found = _terms.get(key)
        if found is not None:
            _terms.move_to_end(key)
            return found
    found = _split(tool)
    with _terms_lock:
        _terms[key] = found
        while len(_terms) > MAX_SPLIT_TOOLS:
            _terms.popitem(last=False)
    return found


def _split(tool: ToolSpec) -> SearchTerms:
    arguments = list(_argument_texts(tool.input_schema))
    texts = (
        words(tool.name),
        words(tool.title),
        words(tool.description),
        [word for name, _ in arguments for word in words(name)],
        [word for _, description in arguments for word in words(description)],
    )
    return SearchTerms(tuple(dict(Counter(field)) for field in texts), tuple(len(field) for field in texts))


class SearchIndex:
    """BM25F over a fixed set of tools (one caller's visible set)."""

    def __init__(self, tools: Sequence[ToolSpec]) -> None:
        self._tools = tuple(tools)
        terms = [search_terms_of(tool) for tool in self._tools]
        total = len(terms)
        averages = [max(1.0, sum(t.lengths[f] for t in terms) / total) if total else 1.0 for f in range(len(FIELDS))]
        # word -> [(tool index, its weighted, length-normalised frequency)]
        self._postings: dict[str, list[tuple[int, float]]] = {}
        for index, term in enumerate(terms):
            frequencies: dict[str, float] = {}
            for f, (_, weight, b) in enumerate(FIELDS):
                norm = 1 - b + b * term.lengths[f] / averages[f]
                for word, count in term.counts[f].items():
                    frequencies[word] = frequencies.get(word, 0.0) + weight * count / norm
            for word, frequency in frequencies.items():
                self._postings.setdefault(word, []).append((index, frequency))
        self._idf = {
            word: math.log(1 + (total - len(posting) + 0.5) / (len(posting) + 0.5))
            for word, posting in self._postings.items()
        }
        self._by_name = {tool.name.lower(): index for index, tool in enumerate(self._tools)}

    def search(self, query: str, limit: int) -> list[ToolSpec]:
        """The best ``limit`` tools for ``query``, best first; ties by name. A query that is a
        tool's exact name finds that tool first."""
        scores: dict[int, float] = {}
        for word, weight in query_words(query).items():
            idf = self._idf.get(word)
            if idf is None:
                continue
            for index, frequency in self._postings[word]:
                scores[index] = scores.get(index, 0.0) + weight * idf * frequency * (K1 + 1) / (frequency + K1)
        exact = self._by_name.get(query.strip().lower())
        if exact is not None:
            scores[exact] = math.inf
        ranked = sorted(scores, key=lambda index: (-scores[index], self._tools[index].name))
        return [self._tools[index] for index in ranked[:limit]]


def search_call(index: SearchIndex, arguments: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The search tool's CallToolResult for ``arguments``, and an error message ("" when it ran):
    bad arguments are a tool error the model can act on, as for any tool."""
    problem = first_error(_input_validator, arguments)
    if problem is not None:
        message = describe_error(problem, subject="arguments") + f". Check the inputSchema of '{SEARCH_TOOL_NAME}'."
        return {"content": [{"type": "text", "text": message}], "isError": True}, message
    found = index.search(arguments["query"], arguments.get("limit", DEFAULT_LIMIT))
    structured = {"tools": [tool.wire for tool in found]}
    text = json.dumps(structured, ensure_ascii=False, separators=(",", ":"))
    return {"content": [{"type": "text", "text": text}], "structuredContent": structured, "isError": False}, ""
