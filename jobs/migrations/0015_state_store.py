# Shared state out of the broker (issue 21): the retry budget's windows and the
# workers' reports in the database, with the budget's two PL/pgSQL functions
# on PostgreSQL (jobs.budget_sql; SQLite runs the Redis state store).

from django.db import migrations, models

from jobs import budget_sql


def _functions(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(budget_sql.COUNT_FIRSTS)
        schema_editor.execute(budget_sql.RESERVE)


def _drop_functions(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(budget_sql.DROP)


class Migration(migrations.Migration):

    dependencies = [
        ('jobs', '0014_scheduler_lease'),
    ]

    operations = [
        migrations.CreateModel(
            name='WorkerReport',
            fields=[
                ('hostname', models.CharField(max_length=255, primary_key=True, serialize=False)),
                ('report', models.TextField()),
                ('reported_at', models.DateTimeField()),
            ],
        ),
        migrations.CreateModel(
            name='RetryBudgetWindow',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('kind', models.CharField(max_length=100)),
                ('width', models.FloatField()),
                ('index', models.BigIntegerField()),
                ('firsts', models.IntegerField(default=0)),
                ('retries', models.IntegerField(default=0)),
                ('exhausted', models.BooleanField(default=False)),
                ('touched_at', models.DateTimeField()),
            ],
            options={
                'constraints': [models.UniqueConstraint(fields=('kind', 'width', 'index'), name='jobs_retrybudget_unique_window')],
            },
        ),
        migrations.RunPython(_functions, _drop_functions),
    ]
