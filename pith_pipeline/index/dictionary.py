"""The index's data dictionary, from one source: the table specs in `index.schema`.

Every description a catalog or a reader sees comes from `TableSpec.description` and
the columns' `comment` metadata, so the Delta tables, `pith-pipeline index schema`
(JSON, Athena/Glue DDL, a dbt `sources.yml`) and the column table in
docs/pages/index-tables.md cannot disagree: the docs table is generated here
(`python -m pith_pipeline.index.dictionary --write` rewrites it between its markers)
and a test checks the page matches.

Also the `categories` dimension: arXiv's archive and category names, shipped as
package data (`pith_pipeline/data/arxiv-taxonomy.json`, see its README).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import pyarrow as pa

from pith_pipeline.index.schema import COMMENT, TABLES, TableSpec

FORMATS = ("json", "athena", "dbt", "markdown")

#: Markers around the generated column table in docs/pages/index-tables.md.
BEGIN = "<!-- BEGIN GENERATED: pith-pipeline index schema --format markdown -->"
END = "<!-- END GENERATED -->"
DOC_PAGE = "docs/pages/index-tables.md"


def comment(field: pa.Field) -> str:
    """A column's description (its `comment` field metadata; empty if none)."""
    meta: dict[bytes, bytes] = field.metadata or {}
    return meta.get(COMMENT.encode(), b"").decode()


def sql_type(t: pa.DataType) -> str:
    """The column's type as Spark, Athena/Glue and Delta's own schema name it."""
    if pa.types.is_list(t):
        return f"array<{sql_type(t.value_type)}>"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "string"
    if pa.types.is_int32(t):
        return "int"
    if pa.types.is_int64(t):
        return "bigint"
    if pa.types.is_boolean(t):
        return "boolean"
    if pa.types.is_timestamp(t):
        return "timestamp"
    if pa.types.is_binary(t):
        return "binary"
    raise ValueError(f"no SQL type for {t}")


def table_location(store_url: str, table: str) -> str:
    """Where a store's index table is (`<store>/index/<table>/`)."""
    return f"{store_url.rstrip('/')}/index/{table}/"


def describe(spec: TableSpec, store_url: str | None = None) -> dict[str, Any]:
    """One table's dictionary entry (what `--format json` prints for it)."""
    out: dict[str, Any] = {
        "name": spec.name,
        "description": spec.description,
        "partition": spec.partition,
        "key": list(spec.key),
        "columns": [
            {"name": f.name, "type": sql_type(f.type), "nullable": f.nullable, "comment": comment(f)}
            for f in spec.schema
        ],
    }
    if store_url:
        out["location"] = table_location(store_url, spec.name)
    return out


def as_json(store_url: str | None = None) -> str:
    tables = [describe(spec, store_url) for spec in TABLES.values()]
    return json.dumps({"tables": tables}, indent=2, ensure_ascii=False) + "\n"


def _sql_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def as_athena(store_url: str, database: str) -> str:
    """Athena/Glue DDL: one `CREATE EXTERNAL TABLE … LOCATION … TBLPROPERTIES
    ('table_type'='DELTA')` per table.

    Athena takes a Delta table's columns from its log and allows nothing but
    `LOCATION` and `table_type` in the statement, so the descriptions are SQL
    comments here (the columns' comments are in the tables' own schema).
    """
    if not store_url.startswith("s3://"):
        raise ValueError(f"{store_url}: Athena reads tables on S3; give the store as s3://bucket/prefix")
    parts = []
    for spec in TABLES.values():
        lines = [f"-- {spec.name}: {spec.description}"]
        width = max(len(f.name) for f in spec.schema)
        for f in spec.schema:
            flag = " NOT NULL" if not f.nullable else ""
            lines.append(f"--   {f.name:<{width}}  {sql_type(f.type)}{flag}: {comment(f)}")
        lines.append(f"CREATE EXTERNAL TABLE IF NOT EXISTS {database}.{spec.name}")
        lines.append(f"LOCATION {_sql_string(table_location(store_url, spec.name))}")
        lines.append("TBLPROPERTIES ('table_type' = 'DELTA');")
        parts.append("\n".join(lines))
    return "\n\n".join(parts) + "\n"


def _yaml(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)  # a JSON string is a YAML flow scalar


def as_dbt(store_url: str | None, database: str) -> str:
    """A dbt `sources.yml`: the tables and columns with descriptions and types, and a
    `not_null` test on every NOT NULL column."""
    lines = [
        "version: 2",
        "",
        "sources:",
        f"  - name: {database}",
        f"    schema: {database}",
        f"    description: {_yaml('Pith index tables (Delta Lake), one row per key at every version')}",
        "    tables:",
    ]
    for spec in TABLES.values():
        lines.append(f"      - name: {spec.name}")
        lines.append(f"        description: {_yaml(spec.description)}")
        if store_url:
            lines.append("        meta:")
            lines.append(f"          location: {_yaml(table_location(store_url, spec.name))}")
            lines.append("          format: delta")
        lines.append("        columns:")
        for f in spec.schema:
            lines.append(f"          - name: {f.name}")
            lines.append(f"            description: {_yaml(comment(f))}")
            lines.append(f"            data_type: {_yaml(sql_type(f.type))}")
            if not f.nullable:
                lines.append("            data_tests:")
                lines.append("              - not_null")
    return "\n".join(lines) + "\n"


def _md(text: str) -> str:
    return text.replace("|", "\\|")


def as_markdown() -> str:
    """The column table of docs/pages/index-tables.md (between `BEGIN` and `END`)."""
    out: list[str] = []
    for spec in TABLES.values():
        out.append(f"**`{spec.name}`** ({_md(spec.description)} Key: `{'`, `'.join(spec.key)}`.)")
        out.append("")
        out.append("| column | type | null | meaning |")
        out.append("|---|---|---|---|")
        for f in spec.schema:
            null = "" if f.nullable else "not null"
            name = f"`{f.name}` (partition)" if f.name == spec.partition else f"`{f.name}`"
            out.append(f"| {name} | {_md(sql_type(f.type))} | {null} | {_md(comment(f))} |")
        out.append("")
    return "\n".join(out)


def render(fmt: str, *, store_url: str | None = None, database: str = "pith") -> str:
    """The dictionary in `fmt` (`FORMATS`); `ValueError` naming what is missing."""
    if fmt == "json":
        return as_json(store_url)
    if fmt == "athena":
        if not store_url:
            raise ValueError("--format athena needs --store s3://bucket/prefix (the tables' location)")
        return as_athena(store_url, database)
    if fmt == "dbt":
        return as_dbt(store_url, database)
    if fmt == "markdown":
        return as_markdown()
    raise ValueError(f"unknown format {fmt!r}; one of {', '.join(FORMATS)}")


def splice(page: str, table: str) -> str:
    """`page` with the text between its markers replaced by `table`."""
    try:
        head, rest = page.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
    except ValueError:
        raise ValueError(f"{DOC_PAGE}: the generated-table markers are missing") from None
    return f"{head}{BEGIN}\n{table}{END}{tail}"


# -- the dictionary in the Delta tables --------------------------------------------

Step = Callable[[Any, Any], bool]


def pending_steps(spec: TableSpec) -> list[Step]:
    """The metadata commits that bring a table made before the dictionary up to `spec`:
    each `step(dt, commit_properties)` commits once if its part differs and returns
    whether it did, so it may run again on a newer version after a lost commit race.

    - columns `spec` has and the table lacks are added (nullable: old rows have none;
      `reindex` fills them);
    - the key and `required` columns become NOT NULL (`tighten_not_null`), when no
      row holds a null in them;
    - the table's name and description;
    - each column's comment.
    """

    def add_columns(dt: Any, props: Any) -> bool:
        from deltalake import Schema

        have = set(dt.schema().to_arrow().names)
        missing = [f.with_nullable(True) for f in spec.schema if f.name not in have]
        if not missing:
            return False
        dt.alter.add_columns(list(Schema.from_arrow(pa.schema(missing)).fields), commit_properties=props)
        return True

    def not_null(dt: Any, props: Any) -> bool:
        return tighten_not_null(dt, spec, props)

    def name(dt: Any, props: Any) -> bool:
        if dt.metadata().name == spec.name:
            return False
        dt.alter.set_table_name(spec.name, commit_properties=props)
        return True

    def description(dt: Any, props: Any) -> bool:
        if dt.metadata().description == spec.description:
            return False
        dt.alter.set_table_description(spec.description, commit_properties=props)
        return True

    def column_comment(column: str, text: str) -> Step:
        def step(dt: Any, props: Any) -> bool:
            field = dt.schema().to_arrow().field(column)
            if comment(field) == text:
                return False
            dt.alter.set_column_metadata(column, {COMMENT: text}, commit_properties=props)
            return True

        return step

    return [
        add_columns,
        not_null,
        name,
        description,
        *(column_comment(f.name, comment(f)) for f in spec.schema),
    ]


def _loose(dt: Any, spec: TableSpec) -> list[str]:
    """Columns `spec` declares NOT NULL that the table's schema still lets be null."""
    arrow = pa.schema(dt.schema().to_arrow())
    names = set(arrow.names)
    return [
        f.name for f in spec.schema if not f.nullable and f.name in names and arrow.field(f.name).nullable
    ]


def null_rows(dt: Any, spec: TableSpec, columns: list[str]) -> int:
    """How many values of `columns` the table version `dt` holds null (0: none).

    From the files' statistics where every file has them (the partition column from
    the partition values); a column some file has no null count for is read.
    """
    import pyarrow.compute as pc

    actions = pa.table(dt.get_add_actions(flatten=True))
    if actions.num_rows == 0:
        return 0
    nulls = 0
    for column in columns:
        if column == spec.partition:
            nulls += actions.column(f"partition.{column}").null_count
            continue
        stat = f"null_count.{column}"
        counts = actions.column(stat) if stat in actions.column_names else None
        if counts is not None and counts.null_count == 0:
            nulls += int(pc.sum(counts).as_py() or 0)
        else:  # a file without statistics for it: the column is read
            nulls += pa.table(dt.to_pyarrow_table(columns=[column])).column(column).null_count
    return nulls


def tighten_not_null(dt: Any, spec: TableSpec, props: Any) -> bool:
    """Make `spec`'s key and `required` columns NOT NULL in a table made before they
    were: one metadata-only commit (an overwrite of no rows whose predicate matches no
    file, with the table's own schema tightened), so no data file is rewritten, the
    change feed shows nothing, and name, description, comments and properties stay.

    Why not `alter.add_constraint`: a CHECK constraint refuses null keys too, but catalogs
    and readers see the column as nullable; NOT NULL in the schema is what they show.
    Delta does not check existing rows when a schema is tightened, so this does first
    (`null_rows`): a table holding a null key (which no writer of ours wrote: every row
    is checked, `rows.check`) is left as it is, and returns False.
    """
    from deltalake import write_deltalake

    loose = _loose(dt, spec)
    if not loose or null_rows(dt, spec, loose):
        return False
    current = pa.schema(dt.schema().to_arrow())
    tight = pa.schema([f.with_nullable(f.nullable and f.name not in loose) for f in current])
    write_deltalake(
        dt,
        tight.empty_table(),
        mode="overwrite",
        schema_mode="overwrite",
        predicate="false",  # matches no file: nothing is removed
        partition_by=list(dt.metadata().partition_columns),
        commit_properties=props,
    )
    return True


def dictionary_current(dt: Any, spec: TableSpec) -> bool:
    """Whether the table already has `spec`'s columns, NOT NULLs, name, description and
    comments."""
    meta = dt.metadata()
    if meta.name != spec.name or meta.description != spec.description or _loose(dt, spec):
        return False
    arrow = dt.schema().to_arrow()
    names = set(arrow.names)
    return all(f.name in names and comment(arrow.field(f.name)) == comment(f) for f in spec.schema)


# -- the categories dimension ----------------------------------------------------

TAXONOMY = "arxiv-taxonomy.json"

CATEGORIES_SCHEMA = pa.schema(
    [
        pa.field(
            "category", pa.string(), nullable=False, metadata={COMMENT: "category code (cs.LG, hep-th)"}
        ),
        pa.field("category_name", pa.string(), metadata={COMMENT: "the category's name as arXiv gives it"}),
        pa.field("archive", pa.string(), metadata={COMMENT: "its archive (cs, hep-th)"}),
        pa.field("archive_name", pa.string(), metadata={COMMENT: "the archive's name"}),
        pa.field("group", pa.string(), metadata={COMMENT: "its group (physics, math, cs, ...)"}),
        pa.field("group_name", pa.string(), metadata={COMMENT: "the group's name"}),
        pa.field("active", pa.bool_(), metadata={COMMENT: "false for categories arXiv no longer uses"}),
        pa.field(
            "alias_of",
            pa.string(),
            metadata={COMMENT: "the category this one is an alias of (math.MP: math-ph)"},
        ),
    ]
)


@cache
def categories() -> pa.Table:
    """arXiv's categories with their archive and group names (package data)."""
    text = resources.files("pith_pipeline").joinpath("data", TAXONOMY).read_text(encoding="utf-8")
    return pa.Table.from_pylist(json.loads(text), schema=CATEGORIES_SCHEMA)


def main(argv: list[str] | None = None) -> int:
    """`--write` regenerates the docs table; `--check` exits 1 if the page differs."""
    args = argv if argv is not None else sys.argv[1:]
    page_path = Path(DOC_PAGE)
    page = page_path.read_text(encoding="utf-8")
    new = splice(page, as_markdown())
    if "--write" in args:
        page_path.write_text(new, encoding="utf-8")
        return 0
    if new != page:
        print(f"{DOC_PAGE}: the column table differs from index/schema.py; run with --write", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
