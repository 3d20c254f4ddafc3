"""The table of the API's rate-limit counters (Django's DatabaseCache, alias "throttle").

Kept in the database so that every gunicorn worker on every host counts
against the same limits (config/settings/security.py). The table name is
settings.THROTTLE_CACHE_TABLE at the time of writing.
"""

from django.core.management import call_command
from django.db import migrations

TABLE = "jobs_throttle_cache"


def create_table(apps, schema_editor):
    # createcachetable skips a table that exists already.
    call_command("createcachetable", TABLE, database=schema_editor.connection.alias, verbosity=0)


def drop_table(apps, schema_editor):
    schema_editor.execute(f'DROP TABLE IF EXISTS "{TABLE}"')


class Migration(migrations.Migration):

    dependencies = [
        ('jobs', '0008_idempotency_key_per_submitter'),
    ]

    operations = [migrations.RunPython(create_table, drop_table)]
