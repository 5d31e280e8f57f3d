"""Slack adapter: mentions in channels and DMs, threads, files in and out.

Entry points for the composition root::

    app = build_app(agent, SlackConfig.from_settings(settings))   # tests inject a client
    await run_slack(agent, settings)                              # python -m bot run slack
"""

from adapters.slack.app import build_app, make_client, run_slack, serve_http
from adapters.slack.config import SlackConfig

__all__ = ["SlackConfig", "build_app", "make_client", "run_slack", "serve_http"]
