"""Persistence: the async SQLAlchemy store and content-addressed media files.

Build one :class:`Database` and one :class:`MediaStore` in the composition
root, ``await db.upgrade()`` once, and talk to them through :class:`Repo`.
"""

from core.store.db import Database, alembic_config
from core.store.handles import allocate_handle
from core.store.media import MediaStore
from core.store.repo import History, HistoryMessage, Repo, TurnRecord

__all__ = [
    "Database",
    "History",
    "HistoryMessage",
    "MediaStore",
    "Repo",
    "TurnRecord",
    "alembic_config",
    "allocate_handle",
]
