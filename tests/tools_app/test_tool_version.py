"""Tool.version moves on every write, whoever writes."""

from __future__ import annotations

from tools_app.catalog.models import Tool


def test_version_starts_at_one_and_increases_on_every_save(make_tool) -> None:
    tool = make_tool("echo")
    assert tool.version == 1
    tool.description = "Changed."
    tool.save()
    assert tool.version == 2
    tool.save()  # even a save without changes is a write
    assert tool.version == 3
    assert Tool.objects.get(pk=tool.pk).version == 3


def test_version_increases_with_update_fields(make_tool) -> None:
    tool = make_tool("echo")
    tool.enabled = False
    tool.save(update_fields=["enabled"])
    stored = Tool.objects.get(pk=tool.pk)
    assert (stored.version, stored.enabled) == (2, False)


def test_versions_of_different_tools_are_independent(make_tool) -> None:
    a, b = make_tool("a"), make_tool("b")
    a.save()
    a.save()
    assert Tool.objects.get(pk=a.pk).version == 3
    assert Tool.objects.get(pk=b.pk).version == 1
