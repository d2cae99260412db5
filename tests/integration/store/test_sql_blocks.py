"""Named SQL blocks: `.sql` files split at `-- name:` headers, loaded once."""

from pathlib import Path

import pytest

from thermostat.store.sql import SqlBlocks, load_sql

LEASE_SQL = Path(__file__).parents[3] / "libs" / "thermostat" / "store" / "lease.sql"


def test_blocks_are_split_at_name_headers_and_keep_their_comments():
    """Each header starts a block that runs to the next header, comments included."""
    blocks = SqlBlocks.parse(
        "-- file comment\n\n-- name: first\n-- why first\nSELECT 1;\n\n--name:second\nSELECT 2;\n",
        source="q.sql",
    )
    assert dict(blocks) == {"first": "-- why first\nSELECT 1;", "second": "SELECT 2;"}


def test_missing_block_is_a_key_error_naming_file_and_block():
    """Asking for a block the file lacks names the file, the block and the blocks it has."""
    blocks = SqlBlocks.parse("-- name: present\nSELECT 1;", source="queries.sql")
    with pytest.raises(KeyError, match=r"queries\.sql has no SQL block named 'absent' \(it has: present\)"):
        blocks["absent"]


@pytest.mark.parametrize(
    ("text", "error"),
    [
        pytest.param("SELECT 1;\n-- name: late\nSELECT 2;", "SQL before the first", id="sql-before-header"),
        pytest.param("-- name: twice\nSELECT 1;\n-- name: twice\nSELECT 2;", "defined twice", id="duplicate"),
        pytest.param("-- name: hollow\n-- only a comment\n-- name: full\nSELECT 1;", "hollow", id="empty"),
        pytest.param("-- name: Bad-Name\nSELECT 1;", "lower_snake_case", id="bad-name"),
    ],
)
def test_malformed_files_are_rejected_when_loaded(text, error):
    """A malformed file fails at load time, never at the first query."""
    with pytest.raises(ValueError, match=error):
        SqlBlocks.parse(text, source="bad.sql")


def test_lease_queries_load_from_their_file():
    """The lease module's file parses into its five statements."""
    assert set(load_sql(LEASE_SQL)) == {"acquire", "acquire_new_term", "renew", "release", "holder"}
