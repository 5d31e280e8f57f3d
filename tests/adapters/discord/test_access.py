"""Allow and deny lists for guilds, channels and roles."""

from __future__ import annotations

from adapters.discord.access import AccessPolicy


def test_no_lists_allow_everything() -> None:
    assert AccessPolicy().refusal(1, [2], [3]) is None
    assert AccessPolicy().refusal(None, [2]) is None


def test_deny_wins_and_allow_lists_restrict() -> None:
    policy = AccessPolicy(allowed_guilds=frozenset({1}), denied_channels=frozenset({20}))
    assert policy.refusal(1, [10]) is None
    assert policy.refusal(2, [10]) == "I'm not enabled in this server."
    assert policy.refusal(1, [20]) == "I'm not enabled in this channel."
    assert policy.refusal(None, [30]) is not None  # DMs: the bot is limited to servers


def test_thread_is_allowed_through_its_parent_channel() -> None:
    policy = AccessPolicy(allowed_channels=frozenset({10}))
    assert policy.refusal(1, [99, 10]) is None  # thread 99 in channel 10
    assert policy.refusal(1, [99]) is not None


def test_roles() -> None:
    policy = AccessPolicy(allowed_roles=frozenset({5}), denied_roles=frozenset({6}))
    assert policy.refusal(1, [10], [5]) is None
    assert policy.refusal(1, [10], [5, 6]) == "One of your roles is not allowed to use me."
    assert policy.refusal(1, [10], [7]) == "You need a particular role to use me here."
