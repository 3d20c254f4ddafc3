# Scheduler leadership (issue 21, item 3): the lease row and the outbox claim columns.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('jobs', '0012_job_progress'),
    ]

    operations = [
        migrations.AddField(
            model_name='job',
            name='publish_claimed_by',
            field=models.CharField(blank=True, default='', max_length=200),
        ),
        migrations.AddField(
            model_name='job',
            name='publish_claimed_until',
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.CreateModel(
            name='SchedulerLease',
            fields=[
                ('name', models.CharField(max_length=50, primary_key=True, serialize=False)),
                ('holder', models.CharField(blank=True, default='', max_length=200)),
                ('term', models.PositiveBigIntegerField(default=0)),
                ('acquired_at', models.DateTimeField(blank=True, null=True)),
                ('expires_at', models.DateTimeField(blank=True, null=True)),
            ],
        ),
    ]
