"""Slack adapter: mentions in channels and DMs, threads, files in and out,
the app's own AI chat (assistant threads: status line, streamed answer with
the plan as task cards, feedback buttons), and the ``usage``/``config``
message commands.

Entry points for the composition root::

    app = build_app(agent, config)   # config: a SlackConfig; tests inject a client
    await run_slack(agent, config)   # python -m bot run slack (bot/app.py's slack_config)
"""

from adapters.slack.app import build_app, make_client, run_slack, serve_http
from adapters.slack.config import SlackConfig

__all__ = ["SlackConfig", "build_app", "make_client", "run_slack", "serve_http"]
