"""Confirmation policies: when a tool call waits for a person to say yes before it runs.

A tool carries the platform admin's policy; an access rule that grants it may name a
stricter one for the callers it applies to, never a looser one (the strictest applicable
policy wins, so a tenant-managed rule can only tighten). Pure functions over snapshots,
used by the hot-path cache, the admin preview and the REST API alike.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import StrEnum

# Loosest first: a rule may move a tool's policy only to the right.
ORDER = ("none", "destructive", "always", "operator")


class Asker(StrEnum):
    """Who has to say yes before a call runs."""

    NOBODY = "nobody"
    USER = "user"  # the client's user, through elicitation
    OPERATOR = "operator"  # an operator of the tenant, in the console


def tightest(policies: Iterable[str]) -> str:
    """The strictest of ``policies`` (blank entries, a rule that sets none, are skipped)."""
    return max((p for p in policies if p in ORDER), key=ORDER.index, default="destructive")


def is_consequential(annotations: Mapping[str, bool]) -> bool:
    """Whether a tool may change its environment destructively, reading the annotations'
    defaults as the MCP spec defines them: readOnlyHint false, destructiveHint true (the
    latter means nothing for a read-only tool)."""
    return not annotations.get("readOnlyHint", False) and annotations.get("destructiveHint", True)


def asker(policy: str, annotations: Mapping[str, bool]) -> Asker:
    if policy == "operator":
        return Asker.OPERATOR
    if policy == "always" or (policy == "destructive" and is_consequential(annotations)):
        return Asker.USER
    return Asker.NOBODY


def confirmation_summary(policy: str, annotations: Mapping[str, bool]) -> str:
    """What a call of a tool with this policy and these annotations waits for, in words."""
    who = asker(policy, annotations)
    if who is Asker.OPERATOR:
        return f"Confirmation ({policy}): each call waits until an operator of the tenant approves it in the console."
    if who is Asker.USER:
        why = "every call" if policy == "always" else "its annotations do not say it is read-only or harmless"
        return f"Confirmation ({policy}): the client's user confirms each call before it runs ({why})."
    why = "nobody is asked" if policy == "none" else "the annotations say it is read-only or not destructive"
    return f"Confirmation ({policy}): calls run at once ({why}). Access rules may still make it stricter."
