"""Rows: SQLAlchemy 2 models, the database handle, and Alembic migrations (SQLite and
Postgres). The blob store lives in `akka_training.blobstore`, which jobs may import."""
