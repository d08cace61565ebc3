"""The data dictionary in the tables (name, description, column comments, NOT NULL
keys), its one source for the docs and catalogs (`index schema`), readable author
names, and the `categories` dimension."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
import yaml
from cli_in_process import run_cli
from deltalake import DeltaTable, write_deltalake
from index_helpers import Runner, record_with_versions

from pith_pipeline.index import run_query
from pith_pipeline.index.delta import location
from pith_pipeline.index.dictionary import DOC_PAGE, as_markdown, categories, comment, splice
from pith_pipeline.index.rows import unicode_name
from pith_pipeline.index.schema import TABLES
from pith_pipeline.storage.base import Store
from pith_pipeline.storage.factory import open_store

ROOT = Path(__file__).parent.parent.parent
SCHRODINGER = "Erwin Schr\\\"odinger, Anna Ja\\'{s}kiewicz, M. {\\O}stergaard, Plain Name"


def _with_authors(line: str, authors: str) -> str:
    record = json.loads(line)
    record["authors"] = authors
    record.pop("authors_parsed", None)  # as arXivRaw gives it: names from `authors`
    return json.dumps(record)


@pytest.mark.parametrize(
    ("tex", "text"),
    [
        ('Schr\\"odinger', "Schrödinger"),
        ("Rastislav \\v{S}r\\'amek", "Rastislav Šrámek"),
        ("Anna Ja\\'{s}kiewicz", "Anna Jaśkiewicz"),
        ("M. {\\O}stergaard", "M. Østergaard"),
        ('Franck Lalo\\"e (LKB - Lhomond)', "Franck Laloë (LKB - Lhomond)"),
        ("G\\'{e}rard~Dupont", "Gérard Dupont"),
        ("A 50% \\'e", "A 50% é"),  # % is no TeX comment in a name
        ("Plain Name", "Plain Name"),
        ("Zoë Ünal", "Zoë Ünal"),
    ],
)
def test_unicode_name_converts_tex(tex: str, text: str) -> None:
    assert unicode_name(tex) == text


def test_a_name_without_tex_is_returned_as_it_is() -> None:
    name = "".join(["Unseen", " Plain Person"])  # not interned: identity means no copy was made
    assert unicode_name(name) is name


def test_unicode_search_finds_tex_names_and_the_record_keeps_arxivs_text(
    tmp_path: Path, sample: list[str], run: Runner
) -> None:
    store = open_store(str(tmp_path / "store"))
    line = _with_authors(sample[0], SCHRODINGER)
    arxiv_id = json.loads(line)["id"]
    run(store, [line, *sample[1:5]])
    got = run_query(
        store,
        "SELECT arxiv_id, authors_text, authors_unicode FROM records"
        " WHERE authors_text_unicode ILIKE '%Schrödinger%'",
    ).rows
    assert [r[0] for r in got] == [arxiv_id]
    # `authors_text` keeps arXiv's TeX (in the graph snapshot's order); the list matches it
    assert sorted(got[0][1].split(", ")) == sorted(SCHRODINGER.split(", "))
    names = dict(zip(got[0][1].split(", "), got[0][2], strict=True))
    assert names == {
        'Erwin Schr\\"odinger': "Erwin Schrödinger",
        "Anna Ja\\'{s}kiewicz": "Anna Jaśkiewicz",
        "M. {\\O}stergaard": "M. Østergaard",
        "Plain Name": "Plain Name",
    }
    found = run_query(
        store, "SELECT count(*) FROM records WHERE list_contains(authors_unicode, 'M. Østergaard')"
    )
    assert found.rows == [(1,)]
    # the canonical record in the published bundle keeps arXiv's bytes
    key = run_query(store, f"SELECT bundle_key FROM records WHERE arxiv_id = '{arxiv_id}'").rows[0][0]
    assert b'Schr\\\\\\"odinger' in store.get(key)  # JSON of Schr\\"odinger
    assert "Schrödinger".encode() not in store.get(key)
    # names without TeX are stored once: null in the Unicode columns of `records`, filled
    # in by the `papers` view (and by coalesce in any engine)
    stored = run_query(
        store,
        "SELECT count(*), count(authors_unicode), count(authors_text_unicode) FROM records",
    ).rows
    assert stored == [(5, 1, 1)]
    filled = run_query(
        store,
        "SELECT count(*) FROM papers WHERE authors_text_unicode IS NOT DISTINCT FROM authors_text"
        " AND authors_unicode IS NOT DISTINCT FROM authors",
    ).rows
    assert filled == [(4,)]
    by_coalesce = run_query(
        store,
        "SELECT count(*) FROM records"
        " WHERE coalesce(authors_text_unicode, authors_text) ILIKE '%Schrödinger%'"
        " OR coalesce(authors_text_unicode, authors_text) = authors_text",
    ).rows
    assert by_coalesce == [(5,)]


def _delta(store: Store, name: str) -> DeltaTable:
    return DeltaTable(location(store).uri(name))


def test_every_table_carries_its_dictionary_and_not_null_keys(
    tmp_path: Path, sample: list[str], run: Runner
) -> None:
    store = open_store(str(tmp_path / "store"))
    run(store, sample[:5])
    for name, spec in TABLES.items():
        dt = _delta(store, name)
        meta = dt.metadata()
        assert (meta.name, meta.description) == (name, spec.description)
        assert spec.description
        fields = {f.name: f for f in dt.schema().fields}
        assert list(fields) == spec.schema.names
        for f in spec.schema:
            assert comment(f), f"{name}.{f.name} has no description"
            assert fields[f.name].metadata.get("comment") == comment(f)
        for column in {*spec.key, *spec.required}:
            assert fields[column].nullable is False, f"{name}.{column} is nullable"
        assert sum(not f.nullable for f in fields.values()) == len({*spec.key, *spec.required})


def test_a_null_key_is_refused_by_the_table_itself(tmp_path: Path, sample: list[str], run: Runner) -> None:
    store = open_store(str(tmp_path / "store"))
    run(store, sample[:2])
    spec = TABLES["aliases"]
    row = {"alias_kind": "doi", "alias_value": None, "alias": "doi:x", "pith_number": "pith:x"}
    loose = pa.schema([f.with_nullable(True) for f in spec.schema])
    with pytest.raises(Exception, match="validation"):
        write_deltalake(
            _delta(store, "aliases"),
            pa.Table.from_pylist([row], schema=loose),
            mode="append",
            partition_by=[spec.partition],
        )


def _old_style_tables(store: Store) -> None:
    """Tables as made before the dictionary: nullable keys, no comments, no name,
    without the unicode author columns."""
    loc = location(store)
    for name, spec in TABLES.items():
        old = pa.schema([pa.field(f.name, f.type) for f in spec.schema if "unicode" not in f.name])
        DeltaTable.create(loc.uri(name), schema=old, partition_by=[spec.partition])


def test_tables_made_before_the_dictionary_take_writes_and_get_it(
    tmp_path: Path, sample: list[str], run: Runner, capsys: pytest.CaptureFixture[str]
) -> None:
    store = open_store(str(tmp_path / "store"))
    _old_style_tables(store)
    paper = _with_authors(sample[0], SCHRODINGER)
    run(store, [record_with_versions(paper, 1), *sample[1:5]])  # appends
    run(store, [paper])  # a new version supersedes v1: MERGE, then the tidy-up rewrite
    for name, spec in TABLES.items():
        dt = _delta(store, name)
        assert dt.metadata().description == spec.description
        fields = {f.name: f for f in dt.schema().fields}
        assert set(fields) == set(spec.schema.names)
        assert all(fields[f.name].metadata.get("comment") == comment(f) for f in spec.schema)
    rows = run_query(store, "SELECT count(*), count(DISTINCT arxiv_id) FROM records").rows
    assert rows == [(6, 5)]
    hit = run_query(store, "SELECT count(*) FROM records WHERE authors_text_unicode LIKE '%Schrödinger%'")
    assert hit.rows == [(2,)]
    for command in ("compact", "reindex"):  # the other writers keep working on it
        result = run_cli(capsys, command, "--store", str(tmp_path / "store"))
        assert result.code == 0, result.err
    # reindex fills the new columns of rows written before them (where they differ)
    hit = run_query(store, "SELECT count(*) FROM papers WHERE authors_unicode IS NULL").rows
    assert hit == [(0,)]
    assert run_query(store, "SELECT count(authors_unicode) FROM records").rows == [(2,)]


def _old_tables_with_rows(store: Store, run: Runner, lines: list[str]) -> dict[str, int]:
    """Tables as the writer before the dictionary made and filled them: every column
    nullable, no comments, no unicode author columns, holding the rows of `lines`
    (appended as that writer did). Returns rows per table."""
    from pith_pipeline.index.bundles import read_bundles

    run(store, lines, finish=False)  # published, not indexed
    _old_style_tables(store)
    keys = [k for k in store.list("pith/") if k.endswith("/bundle.json")]
    rows = [r for _, r in read_bundles(store, keys)]
    loc = location(store)
    counts = {}
    for name, spec in TABLES.items():
        old = pa.schema(_delta(store, name).schema().to_arrow())
        table = pa.Table.from_pylist([row for r in rows for row in getattr(r, name)], schema=old)
        write_deltalake(loc.uri(name), table, mode="append", partition_by=[spec.partition])
        counts[name] = table.num_rows
        assert all(f.nullable for f in old)
    return counts


def test_old_tables_with_rows_get_not_null_keys_without_a_rewrite(
    tmp_path: Path, sample: list[str], run: Runner
) -> None:
    import polars as pl

    store = open_store(str(tmp_path / "store"))
    before = _old_tables_with_rows(store, run, sample[:5])
    run(store, sample[5:8])  # the next run migrates the tables first
    for name, spec in TABLES.items():
        dt = _delta(store, name)
        fields = {f.name: f for f in dt.schema().fields}
        assert {n for n, f in fields.items() if not f.nullable} == {*spec.key, *spec.required}, name
        # the old rows are all there, read by deltalake and Polars alike
        assert dt.to_pyarrow_table().num_rows > before[name]
        assert pl.read_delta(dt.table_uri).height == dt.to_pyarrow_table().num_rows
        # the NOT NULL came in a commit that removed and added no file
        (tighten,) = [h for h in dt.history() if h.get("operationParameters", {}).get("predicate") == "false"]
        metrics = tighten["operationMetrics"]
        assert (metrics["num_added_files"], metrics["num_removed_files"]) == (0, 0), name
    # and the table itself now refuses a null key
    spec = TABLES["records"]
    loose = pa.schema([f.with_nullable(True) for f in spec.schema])
    row = {"pith_number": None, "submitted_month": "2020-01", "arxiv_id": "x", "primary_cat": "cs.LG"}
    with pytest.raises(Exception, match="validation"):
        write_deltalake(
            _delta(store, "records"),
            pa.Table.from_pylist([{**row, "bundle_key": "k"}], schema=loose),
            mode="append",
            partition_by=[spec.partition],
        )


def test_an_old_table_holding_a_null_key_keeps_it_nullable_and_takes_runs(
    tmp_path: Path, sample: list[str], run: Runner
) -> None:
    """Delta does not check existing rows when a schema is tightened: a table whose rows
    hold a null key (no writer of ours wrote one) is left nullable, not made to lie."""
    store = open_store(str(tmp_path / "store"))
    _old_tables_with_rows(store, run, sample[:3])
    spec = TABLES["aliases"]
    old = pa.schema(_delta(store, "aliases").schema().to_arrow())
    bad = {"alias_kind": "doi", "alias_value": None, "alias": "doi:", "pith_number": "pith:x"}
    write_deltalake(
        location(store).uri("aliases"),
        pa.Table.from_pylist([bad], schema=old),
        mode="append",
        partition_by=[spec.partition],
    )
    run(store, sample[3:6])
    fields = {f.name: f for f in _delta(store, "aliases").schema().fields}
    assert fields["alias_value"].nullable
    assert _delta(store, "aliases").metadata().description == spec.description  # the rest is done
    records = {f.name: f for f in _delta(store, "records").schema().fields}
    assert not records["pith_number"].nullable  # the other tables are tightened


def test_the_docs_column_table_is_generated_from_the_schema() -> None:
    page = (ROOT / DOC_PAGE).read_text(encoding="utf-8")
    assert splice(page, as_markdown()) == page, "run: python -m pith_pipeline.index.dictionary --write"
    for spec in TABLES.values():
        for f in spec.schema:
            assert f"`{f.name}`" in page


def test_index_schema_json_lists_every_column_with_its_comment(capsys: pytest.CaptureFixture[str]) -> None:
    result = run_cli(capsys, "index", "schema", "--format", "json", "--store", "s3://bucket/pith")
    assert result.code == 0, result.err
    doc = json.loads(result.out)
    assert [t["name"] for t in doc["tables"]] == list(TABLES)
    for table, spec in zip(doc["tables"], TABLES.values(), strict=True):
        assert table["location"] == f"s3://bucket/pith/index/{spec.name}/"
        assert [c["name"] for c in table["columns"]] == spec.schema.names
        assert all(c["comment"] for c in table["columns"])
        assert {c["name"] for c in table["columns"] if not c["nullable"]} == {*spec.key, *spec.required}


def test_index_schema_athena_is_delta_ddl_per_table(capsys: pytest.CaptureFixture[str]) -> None:
    result = run_cli(capsys, "index", "schema", "--format", "athena", "--store", "s3://bucket/pith/")
    assert result.code == 0, result.err
    code = [line for line in result.out.splitlines() if line and not line.startswith("--")]
    assert code == [
        line
        for name in TABLES
        for line in (
            f"CREATE EXTERNAL TABLE IF NOT EXISTS pith.{name}",
            f"LOCATION 's3://bucket/pith/index/{name}/'",
            "TBLPROPERTIES ('table_type' = 'DELTA');",
        )
    ]
    for spec in TABLES.values():  # the dictionary travels as SQL comments
        assert f"-- {spec.name}: {spec.description}" in result.out.splitlines()


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--format", "athena"], "--store"),
        (["--format", "athena", "--store", "./local-store"], "s3://"),
        (["--database", "x; DROP"], "--database"),
    ],
)
def test_index_schema_refuses_in_one_line(
    capsys: pytest.CaptureFixture[str], args: list[str], says: str
) -> None:
    result = run_cli(capsys, "index", "schema", *args)
    assert result.code == 2
    assert says in result.err
    assert "Traceback" not in result.err


def test_index_schema_dbt_is_sources_yml(capsys: pytest.CaptureFixture[str]) -> None:
    result = run_cli(capsys, "index", "schema", "--format", "dbt", "--database", "analytics")
    assert result.code == 0, result.err
    doc = yaml.safe_load(result.out)
    assert doc["version"] == 2
    (source,) = doc["sources"]
    assert source["name"] == "analytics"
    for table, spec in zip(source["tables"], TABLES.values(), strict=True):
        assert table["name"] == spec.name
        assert table["description"] == spec.description
        columns = {c["name"]: c for c in table["columns"]}
        assert list(columns) == spec.schema.names
        for f in spec.schema:
            assert columns[f.name]["description"] == comment(f)
            assert ("not_null" in columns[f.name].get("data_tests", [])) == (not f.nullable)


def test_categories_name_every_category_and_join_in_query(
    tmp_path: Path, sample: list[str], run: Runner
) -> None:
    table = categories()
    names = dict(zip(table["category"].to_pylist(), table["category_name"].to_pylist(), strict=True))
    assert len(names) == table.num_rows
    assert names["cs.LG"] == "Machine Learning"
    assert names["hep-th"] == "High Energy Physics - Theory"
    assert all(table[c].null_count == 0 for c in ("category_name", "archive", "archive_name", "group"))
    store = open_store(str(tmp_path / "store"))
    run(store, sample)
    missing = run_query(
        store,
        "SELECT DISTINCT c.cat FROM (SELECT unnest(categories) AS cat FROM records) c"
        " LEFT JOIN categories k ON k.category = c.cat WHERE k.category IS NULL",
    ).rows
    assert missing == []
    named = run_query(
        store,
        "SELECT k.category_name, k.archive_name FROM records r JOIN categories k"
        " ON k.category = r.primary_cat WHERE r.arxiv_id = 'hep-th/9901001'",
    ).rows
    assert named == [("High Energy Physics - Theory", "High Energy Physics - Theory")]
