"""Alembic migrations for the store (``core.store``).

Shipped as a package so the config and scripts are found from an installed
wheel: ``core.store.db.alembic_config()`` locates ``alembic.ini`` here.
"""
