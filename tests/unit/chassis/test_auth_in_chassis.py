"""No bearer or tenant check outside the chassis: every gRPC service of the registry declares its token and tenant
rules (chassis/auth.py, chassis/tenancy.py) and never reads a token or a tenant header itself."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from thermostat.chassis.registry import PROGRAMS, SERVICES

SERVICES_ROOT = Path(__file__).resolve().parents[3] / "services"
TENANT_HEADERS = frozenset({"x-strata-tenant"})


def modules(package: str) -> list[Path]:
    return sorted((SERVICES_ROOT / package.replace(".", "/")).rglob("*.py"))


def strings(tree: ast.Module) -> list[str]:
    """Every string constant of the module but its docstrings."""
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]


def imported(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def problems(path: Path, root: Path = SERVICES_ROOT) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = imported(tree)
    found = [f"imports {name}" for name in sorted(names) if name == "hmac" or name.startswith("hmac.")]
    texts = [text.lower() for text in strings(tree)]
    found += [f"reads the {text!r} header" for text in texts if text == "authorization"]
    found += [f"matches a bearer token ({text!r})" for text in texts if text.startswith("bearer ")]
    if any(text in TENANT_HEADERS for text in texts) and "thermostat.chassis.tenancy.TenantRule" not in names:
        found.append("names the tenant header outside a tenant rule's declaration")
    return [f"{path.relative_to(root)}: {problem}" for problem in found]


@pytest.mark.parametrize("service", [pytest.param(s.package, id=s.name) for s in SERVICES])
def test_a_service_checks_no_token_or_tenant_itself(service: str) -> None:
    assert modules(service), f"no modules found for {service}"
    assert [problem for path in modules(service) for problem in problems(path)] == []


def test_the_worker_is_the_one_program_with_a_check_of_its_own() -> None:
    """The reference worker is an HTTP program inside the machine images, not served by the chassis: its bearer
    check (worker/app.py) is its own, and the only one. Another program added to the registry is checked here."""
    assert PROGRAMS == ("thermostat.worker",)


def test_the_scan_finds_a_check_of_its_own(tmp_path: Path) -> None:
    """The scan is not blind: a servicer comparing a bearer token itself is caught."""
    module = tmp_path / "servicer.py"
    module.write_text(
        "import hmac\n"
        "def ok(md, token):\n"
        "    return hmac.compare_digest(md.get('authorization', ''), 'Bearer ' + token) and md['x-strata-tenant']\n"
    )
    assert problems(module, tmp_path) == [
        "servicer.py: imports hmac",
        "servicer.py: reads the 'authorization' header",
        "servicer.py: matches a bearer token ('bearer ')",
        "servicer.py: names the tenant header outside a tenant rule's declaration",
    ]
