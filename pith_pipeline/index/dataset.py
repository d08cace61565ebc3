"""A table's live files as one pyarrow dataset, on the store's own filesystem.

What the reader (`query`) and the writer (`writer`: rewriting view partitions,
comparing what is indexed) both open, so it sits below both: local directories
through pyarrow's local filesystem, S3 through the store's `arrow_filesystem`
(`pyarrow.fs.S3FileSystem` on the same endpoint and credentials as boto3). Each
file carries its partition value from the Delta log (`tables.live_files`), and
strings are declared plain (or, with `views`, as `string_view`: see `query`).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from pith_pipeline.errors import StorageError
from pith_pipeline.index.delta import Location
from pith_pipeline.index.schema import TableSpec
from pith_pipeline.storage.base import Store


def arrow_source(store: Store) -> tuple[Any, str]:
    """(pyarrow filesystem, root path) of a local or S3 store."""
    found = store.arrow_filesystem()
    if found is not None:
        return found
    raise StorageError(f"{store.url}: the index can only be read from a local directory or an s3:// store")


def _view(t: pa.DataType) -> pa.DataType:
    if t == pa.string():
        return pa.string_view()
    if pa.types.is_list(t):
        return pa.list_(_view(t.value_type))
    return t


def read_schema(spec: TableSpec, *, views: bool = False) -> pa.Schema:
    """The dataset schema; with `views`, strings as views except the partition column."""
    if not views:
        return spec.schema
    return pa.schema(
        [f if f.name == spec.partition else pa.field(f.name, _view(f.type)) for f in spec.schema]
    )


def dataset_of(
    store: Store, loc: Location, spec: TableSpec, files: list[dict[str, Any]], *, views: bool = False
) -> Any:
    """A pyarrow dataset of a table's live files (see `tables.live_files`)."""
    from urllib.parse import unquote

    import pyarrow.dataset as ds  # here: `build` workers import this package, never query

    if not files:
        return ds.dataset(read_schema(spec, views=views).empty_table())
    fs, root = arrow_source(store)
    fmt = ds.ParquetFileFormat()
    fragments = [
        fmt.make_fragment(
            f"{root}/index/{spec.name}/{unquote(f['path'])}",
            filesystem=fs,
            partition_expression=ds.field(spec.partition) == f["partition"],
        )
        for f in files
    ]
    del loc
    return ds.FileSystemDataset(fragments, read_schema(spec, views=views), fmt, fs)
