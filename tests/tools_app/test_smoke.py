from tenants.principal import Principal
from tests.credentials import visible


def test_granted_tool_is_visible(acme, make_key, make_tool, grant):
    key, _ = make_key(acme)
    tool = make_tool("echo")
    grant(acme, tool)
    principal = Principal(acme.pk, acme.slug, key.pk, key.name, key.prefix, frozenset())
    assert [t.name for t in visible(principal)] == ["echo"]
