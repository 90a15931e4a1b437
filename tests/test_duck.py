"""DuckDB, the project's one engine for columnar work: what it spills goes to the system's temporary
folder, never into the folder a command runs in."""

from __future__ import annotations

import tempfile
from pathlib import Path

from ragspine_pipeline import duck


def test_duckdb_spills_under_the_system_temporary_folder_not_the_working_directory():
    spill = Path(duck.column("SELECT current_setting('temp_directory')").to_pylist()[0])
    assert spill.parent == Path(tempfile.gettempdir()) and spill.name.startswith("ragspine-duckdb-")
