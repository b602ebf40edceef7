"""Result derivations compressed with lz4 on PostgreSQL 14+ built with it.

A run writes every candidate's derivation (~32 KB of JSON each, 5.8 MB for the typical bench
scenario's 180 rows); PostgreSQL compresses such values with pglz by default, and writing the
180 rows took 0.126 s with pglz and 0.054 s with lz4 (the same rows through one cursor on this
project's bench database). Older servers, servers built without lz4 and SQLite keep their
default: the setting changes how the values are stored, never what they are.
"""

from django.db import DatabaseError, migrations, transaction

COLUMN = "ALTER TABLE planner_candidateresult ALTER COLUMN derivation SET COMPRESSION {}"


def _set(method: str):
    def apply(apps, schema_editor):
        connection = schema_editor.connection
        if connection.vendor != "postgresql" or connection.pg_version < 140000:
            return
        try:
            with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
                cursor.execute(COLUMN.format(method))
        except DatabaseError:  # built without lz4: pglz stays
            pass

    return apply


class Migration(migrations.Migration):
    dependencies = [("planner", "0014_result_expert_precision")]

    operations = [migrations.RunPython(_set("lz4"), _set("pglz"))]
