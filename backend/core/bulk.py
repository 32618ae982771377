"""Inserting and updating many rows of one model that differ in a few columns, fast.

``QuerySet.bulk_create`` compiles every value of every row through the ORM (a 10,000-job
array spent seconds there); here the columns the rows share are prepared once, from a
template instance, and only the differing ones per row, then sent as one
multi-row INSERT per batch on MySQL, with the shared values written into it as literals
rather than escaped again for each row (``executemany`` elsewhere). ``update_rows`` is
``QuerySet.bulk_update`` made to follow what differs: the fields every object has the same
value in are set by one plain UPDATE, and the others by one ``CASE pk WHEN ... THEN ...``
per field, its values prepared by their fields (``bulk_update`` builds and compiles a
``When`` expression per row and field: a third of a job manager round of 32 starts).
``rows_by_key`` turns many primary keys into few conditions: runs of consecutive keys (a
job array's rows) as ranges.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from django.db import connection, models
from django.db.models import Q


def _literal(value: object) -> str:
    """The value as an SQL literal of the MySQL connection, ready for %-formatting."""
    connection.ensure_connection()
    literal = connection.connection.literal(value)
    text = literal.decode() if isinstance(literal, bytes) else str(literal)
    return text.replace("%", "%%")


def insert_rows(
    template: models.Model, rows: Iterable[Mapping[str, object]], batch_size: int = 2000
) -> int:
    """Insert one row per mapping: the template's values, with the mapping's fields (by
    attribute name, e.g. ``job_id`` for a foreign key) over them. No signals, no pks set
    on anything. Returns how many rows were inserted."""
    fields = [field for field in template._meta.concrete_fields if not field.primary_key]
    for field in fields:  # what pre_save would do: auto_now, defaults
        if getattr(template, field.attname) is None and field.has_default():
            setattr(template, field.attname, field.get_default())
        field.pre_save(template, add=True)
    rows = iter(rows)
    first = next(rows, None)
    if first is None:
        return 0
    varying = [field for field in fields if field.attname in first]
    shared = [field for field in fields if field.attname not in first]
    table = connection.ops.quote_name(template._meta.db_table)
    # A concrete field always has its column; the hints allow None for the others.
    columns = ", ".join(
        connection.ops.quote_name(f.column or f.attname) for f in [*varying, *shared]
    )
    shared_values = tuple(
        field.get_db_prep_save(getattr(template, field.attname), connection) for field in shared
    )
    inline = connection.vendor == "mysql"
    if inline:
        marks = ["%s"] * len(varying) + [_literal(value) for value in shared_values]
        row_sql = f"({', '.join(marks)})"
    sql = f"INSERT INTO {table} ({columns}) VALUES ({', '.join(['%s'] * len(fields))})"

    def flush(cursor, batch: list[tuple]) -> None:
        if inline:  # one multi-row INSERT, the shared values in it once per row as text
            statement = f"INSERT INTO {table} ({columns}) VALUES " + ", ".join(
                [row_sql] * len(batch)
            )
            cursor.execute(statement, [value for values in batch for value in values])
        else:
            cursor.executemany(sql, batch)

    batch: list[tuple] = []
    inserted = 0
    with connection.cursor() as cursor:
        for row in itertools.chain([first], rows):
            values = tuple(f.get_db_prep_save(row[f.attname], connection) for f in varying)
            batch.append(values if inline else values + shared_values)
            if len(batch) >= batch_size:
                flush(cursor, batch)
                inserted += len(batch)
                batch = []
        if batch:
            flush(cursor, batch)
            inserted += len(batch)
    return inserted


def update_rows(
    objects: Sequence[models.Model], fields: Sequence[str], batch_size: int = 500
) -> None:
    """Save ``fields`` (attribute names) of every object, as ``bulk_update`` does. The
    fields all objects share a value in go into one ``UPDATE ... WHERE pk IN`` per batch;
    only the others become ``bulk_update``'s CASE per row and field, which is where its
    time goes (a round's 32 starts differ in their placements, and little else)."""
    if not objects:
        return
    first = objects[0]
    shared = [
        name for name in fields if all(getattr(o, name) == getattr(first, name) for o in objects)
    ]
    varying = [name for name in fields if name not in shared]
    manager = type(first)._default_manager
    if shared:
        values = {name: getattr(first, name) for name in shared}
        for rows in rows_by_key([o.pk for o in objects], batch_size):
            manager.filter(rows).update(**values)
    if varying:
        for start in range(0, len(objects), batch_size):
            _update_by_case(objects[start : start + batch_size], varying)


def _update_by_case(objects: Sequence[models.Model], names: Sequence[str]) -> None:
    """One UPDATE setting each named field of each object to its own value."""
    meta = type(objects[0])._meta
    quote = connection.ops.quote_name
    # A concrete field always has its column; the hints allow None for the others.
    pk_column = quote(meta.pk.column or meta.pk.attname)
    pks = [obj.pk for obj in objects]
    assignments: list[str] = []
    params: list[Any] = []
    for name in names:
        field = meta.get_field(name)
        assert isinstance(field, models.Field) and field.concrete  # a column to write
        whens = " ".join(["WHEN %s THEN %s"] * len(objects))
        assignments.append(f"{quote(field.column or field.attname)} = CASE {pk_column} {whens} END")
        for obj in objects:
            params += [obj.pk, field.get_db_prep_save(getattr(obj, field.attname), connection)]
    marks = ", ".join(["%s"] * len(pks))
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {quote(meta.db_table)} SET {', '.join(assignments)} "
            f"WHERE {pk_column} IN ({marks})",
            [*params, *pks],
        )


# A run of consecutive primary keys this long is matched as a range, not listed.
KEY_RUN = 16
KEYS_PER_QUERY = 1000  # listed keys in one condition
RANGES_PER_QUERY = 100


def rows_by_key(pks: Iterable[int], keys_per_query: int = KEYS_PER_QUERY) -> Iterator[Q]:
    """Conditions matching exactly the rows with these primary keys, few enough that each
    makes one short query: runs of consecutive keys (an array's jobs are stored one after
    another) as ranges, which the database walks in key order instead of looking each key
    up, and the other keys listed."""
    keys = sorted(set(pks))
    ranges: list[tuple[int, int]] = []
    single: list[int] = []
    start = 0
    for index in range(1, len(keys) + 1):
        if index == len(keys) or keys[index] != keys[index - 1] + 1:
            if index - start >= KEY_RUN:
                ranges.append((keys[start], keys[index - 1]))
            else:
                single += keys[start:index]
            start = index
    for chunk in range(0, len(ranges), RANGES_PER_QUERY):
        condition = Q()
        for low, high in ranges[chunk : chunk + RANGES_PER_QUERY]:
            condition |= Q(pk__range=(low, high))
        yield condition
    for chunk in range(0, len(single), keys_per_query):
        yield Q(pk__in=single[chunk : chunk + keys_per_query])
