"""A run as the loader sees it: what it covered and its manifest (`runs/<run_id>/`).

Run manifests are not index data: they record what a run published, and are written
by the loader after the index update (`manifest.finish_run`).
"""
