"""Named SQL parameters: `:name` in a block becomes `$n` once at load, and a call binds by keyword."""

import ast
from pathlib import Path

import pytest

from thermostat.store.sql import SqlBlocks

ROOT = Path(__file__).resolve().parents[3]

BLOCKS = SqlBlocks.parse(
    "-- name: take\n"
    "-- :not_a_param in a comment\n"
    "SELECT :tenant::text, ':quoted', \"odd:name\", $body$ :inside $body$\n"
    "  FROM jobs WHERE tenant = :tenant AND machine = :machine AND image = coalesce(:image, '');\n"
    "-- name: plain\nSELECT 1;\n",
    source="jobs.sql",
)


def test_names_become_numbers_in_order_of_first_use():
    """Each name is numbered where it first appears; a name used again is the same parameter."""
    statement = BLOCKS.statement("take")
    assert statement.params == ("tenant", "machine", "image")
    assert "$1::text" in statement.sql
    assert "tenant = $1 AND machine = $2 AND image = coalesce($3, '')" in statement.sql


def test_casts_comments_strings_and_dollar_quotes_are_not_parameters():
    """`::type`, a comment, a quoted string or identifier and a dollar-quoted body keep their colons."""
    sql = BLOCKS["take"]
    assert "-- :not_a_param in a comment" in sql
    assert "':quoted'" in sql
    assert '"odd:name"' in sql
    assert "$body$ :inside $body$" in sql


def test_bind_puts_keyword_values_in_the_statements_order():
    """A call names its values in any order; the driver gets them as `$1`…`$n`."""
    assert BLOCKS.bind("take", image="img", machine="m-1", tenant="t-a") == (BLOCKS["take"], "t-a", "m-1", "img")


def test_a_block_without_parameters_binds_to_its_sql_alone():
    """A statement that takes nothing is its SQL and no values."""
    assert BLOCKS.bind("plain") == ("SELECT 1;",)


def test_a_missing_keyword_is_a_type_error_naming_block_and_parameter():
    """Leaving a parameter out fails at the call, naming the file, the block and what it takes."""
    with pytest.raises(
        TypeError, match=r"jobs\.sql block 'take': missing :image \(it takes: :tenant, :machine, :image\)"
    ):
        BLOCKS.bind("take", tenant="t-a", machine="m-1")


def test_an_unknown_keyword_is_a_type_error_naming_it():
    """A value the statement has no parameter for (a typo, a stale name) fails at the call."""
    with pytest.raises(TypeError, match=r"jobs\.sql block 'take': no parameter :imag \(it takes"):
        BLOCKS.bind("take", tenant="t-a", machine="m-1", image="img", imag="img")


def test_bind_many_orders_each_rows_values():
    """`executemany` gets the SQL once and every row's values in `$n` order, each row checked."""
    sql, rows = BLOCKS.bind_many("take", [{"tenant": "a", "machine": "m", "image": "i"}])
    assert (sql, rows) == (BLOCKS["take"], [("a", "m", "i")])
    with pytest.raises(TypeError, match="missing :image"):
        BLOCKS.bind_many("take", [{"tenant": "a", "machine": "m"}])


def test_binding_a_missing_block_is_the_key_error_naming_file_and_block():
    """A typo in the block's name fails as reading it does."""
    with pytest.raises(KeyError, match=r"jobs\.sql has no SQL block named 'tkae'"):
        BLOCKS.bind("tkae")


@pytest.mark.parametrize(
    ("text", "error"),
    [
        pytest.param("-- name: old\nSELECT $1;", r"\$1 is positional; name the parameter", id="positional"),
        pytest.param("-- name: kw\nSELECT :from;", "Python keyword", id="python-keyword"),
    ],
)
def test_parameters_that_cannot_be_bound_by_name_are_refused_at_load(text, error):
    """A `$n` left in a file, or a name no keyword can carry, fails when the file is parsed."""
    with pytest.raises(ValueError, match=error):
        SqlBlocks.parse(text, source="bad.sql")


def _indexed_blocks(path: Path) -> list[str]:
    """Where a module indexes a name it loaded with load_sql (`Q["x"]`: the text, its values then go by position)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    loaded = {
        target.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign)
        and isinstance(node.value, ast.Call)
        and isinstance(node.value.func, ast.Name)
        and node.value.func.id == "load_sql"
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    return [
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id in loaded
    ]


def test_runtime_code_binds_every_block_by_keyword():
    """No module of libs/ or services/ reads a block's text to call it: every call goes through `bind` by name."""
    modules = [p for top in ("libs", "services") for p in (ROOT / top / "thermostat").rglob("*.py")]
    assert any("load_sql(" in p.read_text(encoding="utf-8") for p in modules), "the scan reads the wrong folders"
    assert [hit for p in modules for hit in _indexed_blocks(p)] == []
