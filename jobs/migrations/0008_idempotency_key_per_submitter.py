"""Idempotency keys per submitter and kind; an index for "my jobs, newest first".

Replaces the unique index on (kind, idempotency_key) with two partial ones:
(kind, created_by, idempotency_key) for jobs with a submitter and (kind,
idempotency_key) for jobs without one (a unique index treats NULLs as
distinct, so one index could not cover both). Safe on a big table: on
PostgreSQL every index is built CONCURRENTLY (no lock that blocks writes;
hence atomic = False) and the new ones exist before the old one is dropped,
so a key is never unguarded. An index left INVALID by an interrupted run is
dropped and built again. SQLite builds them in place.
"""

from django.conf import settings
from django.db import migrations, models

OLD = ("jobs_job_unique_idempotency_key_per_kind", True, "(kind, idempotency_key)",
       "idempotency_key IS NOT NULL")
NEW = [
    ("jobs_job_unique_idem_key_per_submitter", True, "(kind, created_by_id, idempotency_key)",
     "idempotency_key IS NOT NULL AND created_by_id IS NOT NULL"),
    ("jobs_job_unique_idem_key_no_submitter", True, "(kind, idempotency_key)",
     "idempotency_key IS NOT NULL AND created_by_id IS NULL"),
    ("jobs_job_owner_created_idx", False, "(created_by_id, created_at)", None),
]


def _postgres(schema_editor):
    return schema_editor.connection.vendor == "postgresql"


def _create(schema_editor, name, unique, columns, where):
    concurrently = "CONCURRENTLY " if _postgres(schema_editor) else ""
    if _postgres(schema_editor):
        with schema_editor.connection.cursor() as cursor:
            cursor.execute(
                "SELECT NOT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
                "WHERE c.relname = %s",
                [name],
            )
            row = cursor.fetchone()
        if row is not None and row[0]:  # left INVALID by an interrupted CONCURRENTLY build
            schema_editor.execute(f'DROP INDEX CONCURRENTLY IF EXISTS "{name}"')
    schema_editor.execute(
        f'CREATE {"UNIQUE " if unique else ""}INDEX {concurrently}IF NOT EXISTS "{name}" '
        f'ON "jobs_job" {columns}{f" WHERE {where}" if where else ""}'
    )


def _drop(schema_editor, name):
    concurrently = "CONCURRENTLY " if _postgres(schema_editor) else ""
    schema_editor.execute(f'DROP INDEX {concurrently}IF EXISTS "{name}"')


def forwards(apps, schema_editor):
    for index in NEW:
        _create(schema_editor, *index)
    _drop(schema_editor, OLD[0])


def backwards(apps, schema_editor):
    # Fails if two submitters now hold the same key for one kind, as it must.
    _create(schema_editor, *OLD)
    for index in NEW:
        _drop(schema_editor, index[0])


class Migration(migrations.Migration):

    atomic = False

    dependencies = [
        ('jobs', '0007_memory_limit'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunPython(forwards, backwards)],
            state_operations=[
                migrations.RemoveConstraint(
                    model_name='job',
                    name='jobs_job_unique_idempotency_key_per_kind',
                ),
                migrations.AddIndex(
                    model_name='job',
                    index=models.Index(fields=['created_by', 'created_at'], name='jobs_job_owner_created_idx'),
                ),
                migrations.AddConstraint(
                    model_name='job',
                    constraint=models.UniqueConstraint(condition=models.Q(('created_by__isnull', False), ('idempotency_key__isnull', False)), fields=('kind', 'created_by', 'idempotency_key'), name='jobs_job_unique_idem_key_per_submitter'),
                ),
                migrations.AddConstraint(
                    model_name='job',
                    constraint=models.UniqueConstraint(condition=models.Q(('created_by__isnull', True), ('idempotency_key__isnull', False)), fields=('kind', 'idempotency_key'), name='jobs_job_unique_idem_key_no_submitter'),
                ),
            ],
        ),
    ]
