# Rate limits per kind and key (issue 24 item 1): the GCRA bucket table, the partial index of
# the jobs waiting for a rate limit and, on PostgreSQL, jobs_rate_admit / _wait / _hold
# (jobs.rate_sql).

from django.db import migrations, models

from jobs import rate_sql


def _functions(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(rate_sql.CREATE)


def _drop_functions(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(rate_sql.DROP)


class Migration(migrations.Migration):
    dependencies = [("jobs", "0020_fuse")]

    operations = [
        migrations.CreateModel(
            name="RateBucket",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("kind", models.CharField(max_length=100)),
                ("key", models.TextField(blank=True, default="")),
                ("tat", models.FloatField(null=True)),
                ("plan", models.FloatField(null=True)),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        fields=("kind", "key"), name="jobs_ratebucket_unique_kind_key"
                    )
                ],
            },
        ),
        migrations.AddIndex(
            model_name="job",
            index=models.Index(
                condition=models.Q(("status", "queued"), ("waiting_reason", "rate_limit")),
                fields=["next_attempt_at"],
                name="jobs_job_rate_idx",
            ),
        ),
        migrations.RunPython(_functions, _drop_functions),
    ]
