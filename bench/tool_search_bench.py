"""The search tool's ranking over GitHub's REST API (1,223 tools), in process, no server:

    python -m bench.tool_search_bench [--runs 3]

Builds each operation's tool definition as the OpenAPI import would (no database), then per run:
splitting every tool's words (once per catalog load on a server), building the index (once per
visible set), and the thirty queries of tests/mcp/github_catalog.py (twenty the weights were
chosen on, ten held out), each timed. Prints the median and spread of the runs and the hit rates.
Needs the npm package @octokit/openapi (installed by scripts/openapi_corpus.sh when missing).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import time

from bench.measure import spread

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mcp_platform.settings")
os.environ.setdefault("DATABASE_URL", "sqlite://:memory:")

import django

django.setup()

from tests.mcp.github_catalog import DESCRIPTION, HELD_OUT, PREFIX, QUERIES, ROOT, hit_rates  # noqa: E402
from tools_app.catalog import search  # noqa: E402
from tools_app.catalog.spec import ToolSpec  # noqa: E402
from tools_app.imports.openapi.document import check_structure, parse_text, version_of  # noqa: E402
from tools_app.imports.openapi.operations import OperationReader, Selection  # noqa: E402
from tools_app.imports.openapi.security import SecurityMap, Where  # noqa: E402


def github_tools() -> list[ToolSpec]:
    if not DESCRIPTION.is_file():
        subprocess.run([str(ROOT / "scripts" / "openapi_corpus.sh")], check=True)
    document = parse_text(DESCRIPTION.read_bytes())
    version = version_of(document)
    base_url = "https://api.github.com"
    security = SecurityMap(document, version, where=Where("gh", None, "", base_url))
    reader = OperationReader(
        document,
        version,
        base_url=base_url,
        prefix=PREFIX,
        auth=security,
        structure=check_structure(document, version),
    )
    taken: set[str] = set()
    tools = []
    for number, (method, path, operation, _) in enumerate(reader.operations(Selection())):
        fields = reader.draft(method, path, operation, taken).fields
        tools.append(
            ToolSpec(
                id=number,
                tenant_id=1,
                name=fields["name"],
                title=fields.get("title", ""),
                description=fields["description"],
                icons=[],
                tags=frozenset(),
                backend_kind="http",
                backend_config={},
                timeout_seconds=30,
                enabled=True,
                version=1,
                input_schema=fields["input_schema"],
                output_schema=fields.get("output_schema"),
                annotations={},
                execution_mode="inline",
                task_support="forbidden",
            )
        )
    return tools


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    splits, builds, queries = [], [], []
    results: dict[str, list[str]] = {}
    for _ in range(args.runs):
        tools = github_tools()
        search.forget_split_words()
        started = time.perf_counter()
        for tool in tools:
            search.search_terms_of(tool)
        splits.append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        index = search.SearchIndex(tools)
        builds.append((time.perf_counter() - started) * 1000)
        for query, _ in QUERIES + HELD_OUT:
            started = time.perf_counter()
            results[query] = [tool.name for tool in index.search(query, 5)]
            queries.append((time.perf_counter() - started) * 1000)
    print(f"{len(tools)} tools, {args.runs} runs (median, min-max)")
    print(f"  split words of every tool: {spread(splits, 1)} ms")
    print(f"  build the index:           {spread(builds, 1)} ms")
    print(f"  one query:                 {spread(queries, 1)} ms  ({len(queries)} queries)")
    first, five = hit_rates(QUERIES, results)
    held_first, held_five = hit_rates(HELD_OUT, results)
    print(f"  hit@1 {first}/{len(QUERIES)}, hit@5 {five}/{len(QUERIES)}; held out: ", end="")
    print(f"hit@1 {held_first}/{len(HELD_OUT)}, hit@5 {held_five}/{len(HELD_OUT)}")


if __name__ == "__main__":
    main()
