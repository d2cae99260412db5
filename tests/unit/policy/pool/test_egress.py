"""Egress, opt-in per docker type: which allow-list entries are taken, and the proxy configuration they become, one
rule per test."""

from __future__ import annotations

import re

import pytest

from thermostat.policy.pool.egress import (
    LABEL_EGRESS_LIST,
    LABEL_EGRESS_OF,
    PROXY_PORT,
    allowed_pairs,
    create_outside_network_body,
    create_proxy_body,
    egress_digest,
    egress_filter,
    egress_host_refusal,
    filter_lines,
    machine_network_key,
    proxy_config,
    worker_proxy_env,
)
from thermostat.policy.pool.tenant_network import network_key


@pytest.mark.parametrize(
    ("host", "refused"),
    [
        pytest.param("pypi.org", None, id="a-name"),
        pytest.param("files.pythonhosted.org:443", None, id="a-name-and-port"),
        pytest.param("198.51.100.2:18080", None, id="an-ipv4-and-port"),
        pytest.param("localhost", None, id="a-single-label"),
        pytest.param("*.example.com", "DNS name or IPv4", id="a-wildcard"),
        pytest.param("https://pypi.org", "DNS name or IPv4", id="a-scheme"),
        pytest.param("pypi.org/simple", "DNS name or IPv4", id="a-path"),
        pytest.param("user@pypi.org", "DNS name or IPv4", id="a-user"),
        pytest.param("-bad.org", "DNS name or IPv4", id="a-leading-hyphen"),
        pytest.param("pypi..org", "DNS name or IPv4", id="an-empty-label"),
        pytest.param("", "DNS name or IPv4", id="empty"),
        pytest.param(":443", "DNS name or IPv4", id="a-port-alone"),
        pytest.param("300.1.1.1", "DNS name or IPv4", id="an-address-out-of-range"),
        pytest.param("1.2.3", "DNS name or IPv4", id="a-short-address"),
        pytest.param("pypi.org:0", "port 1-65535", id="port-0"),
        pytest.param("pypi.org:65536", "port 1-65535", id="port-too-high"),
        pytest.param("pypi.org:0443", "port 1-65535", id="port-padded"),
        pytest.param("pypi.org:https", "port 1-65535", id="port-by-name"),
        pytest.param("pypi.org:443:1", "DNS name or IPv4", id="two-ports"),
        pytest.param("[::1]:443", "DNS name or IPv4", id="ipv6-not-offered"),
    ],
)
def test_an_entry_is_a_host_or_host_and_port_nothing_wider(host: str, refused: str | None) -> None:
    """A DNS name or IPv4 address, optionally a port; a wildcard, scheme, path or user is refused."""
    problem = egress_host_refusal(host)
    assert (problem is None) if refused is None else (problem is not None and refused in problem)


def test_a_host_without_a_port_allows_https_and_http_only() -> None:
    """`host` is 443 and 80; `host:port` is that port alone; names are lower-cased, pairs listed once."""
    assert allowed_pairs(["PyPI.org", "pypi.org:443", "10.0.0.1:8080"]) == (
        ("pypi.org", 443), ("pypi.org", 80), ("10.0.0.1", 8080)
    )  # fmt: skip


def test_the_filter_matches_exactly_the_listed_pairs() -> None:
    """CONNECT host:port and http://host[:port]/ of a listed pair match; another host, port, a user part or a longer
    name does not."""
    lines = filter_lines(["pypi.org", "198.51.100.2:18080"]).splitlines()
    patterns = [re.compile(line, re.IGNORECASE) for line in lines]

    def allowed(url: str) -> bool:
        return any(pattern.search(url) for pattern in patterns)

    for url in ("pypi.org:443", "pypi.org:80", "http://pypi.org/simple/", "http://pypi.org:80/", "http://pypi.org",
                "198.51.100.2:18080", "http://198.51.100.2:18080/x"):  # fmt: skip
        assert allowed(url), url
    refused = (
        "pypi.org:22", "evil.org:443", "pypi.org.evil.org:443", "xpypi.org:443", "http://pypi.org.evil/",
        "http://pypi.org@evil.org/", "http://pypi.org:8080/", "198.51.100.2:80", "198.51.100.25:18080",
        "http://198.51.100.2/", "http://198.51.100.2:18080@198.51.100.3:18080/", "198x51.100.2:18080",
    )  # fmt: skip
    for url in refused:
        assert not allowed(url), url


def test_the_proxy_denies_by_default_and_connects_only_to_listed_ports() -> None:
    """FilterDefaultDeny on the URL filter, one ConnectPort per listed port, no Via header."""
    config = proxy_config(["pypi.org", "198.51.100.2:18080"]).splitlines()
    assert f"Port {PROXY_PORT}" in config
    assert {"FilterDefaultDeny Yes", "FilterURLs Yes", "FilterType ere", "DisableViaHeader Yes"} <= set(config)
    assert [line for line in config if line.startswith("ConnectPort")] == [
        "ConnectPort 80", "ConnectPort 443", "ConnectPort 18080"
    ]  # fmt: skip


def test_one_list_is_one_digest_whatever_its_order() -> None:
    """Order, case and duplicates aside the same list shares a proxy; another list gets another."""
    assert egress_digest(["a.org", "B.org:8080"]) == egress_digest(["b.org:8080", "a.org", "a.org:443", "a.org:80"])
    assert egress_digest(["a.org"]) != egress_digest(["a.org:443"])


def test_the_proxy_is_confined_as_a_machine_is_and_labelled_for_its_tenant_network() -> None:
    """All capabilities dropped, no-new-privileges, read-only root, a pids and memory limit, nobody; labelled with the
    pool, the tenant network's key and the list's digest; on the outside network first."""
    body = create_proxy_body(image="egress:1", hosts=["pypi.org"], pool="p", key="k" * 11, outside="p-egress-kkk")
    host_config = body["HostConfig"]
    assert (body["Image"], body["User"], host_config["NetworkMode"]) == ("egress:1", "65534:65534", "p-egress-kkk")
    assert (host_config["CapDrop"], host_config["SecurityOpt"]) == (["ALL"], ["no-new-privileges:true"])
    assert host_config["ReadonlyRootfs"] is True and host_config["PidsLimit"] > 0 and host_config["Memory"] > 0
    assert "Binds" not in host_config and "Mounts" not in host_config
    assert body["Labels"] == {"thermostat.pool": "p", LABEL_EGRESS_OF: "k" * 11,
                              LABEL_EGRESS_LIST: egress_digest(["pypi.org"])}  # fmt: skip
    env = dict(item.split("=", 1) for item in body["Env"])
    assert env == {"EGRESS_CONFIG": proxy_config(["pypi.org"]), "EGRESS_FILTER": filter_lines(["pypi.org"])}
    assert egress_filter("p", "k")["label"] == ["thermostat.pool=p", f"{LABEL_EGRESS_OF}=k"]


def test_the_outside_network_is_the_tenants_own_and_not_internal() -> None:
    """Named and labelled by the tenant network's key, its bridge thte{key}; it has the route out."""
    body = create_outside_network_body("p", "tenant-a", "0123456789a")
    assert (body["Name"], body["Internal"]) == ("p-egress-0123456789a", False)
    assert body["Options"] == {"com.docker.network.bridge.name": "thte0123456789a"}
    assert body["Labels"][LABEL_EGRESS_OF] == "0123456789a"


def test_a_worker_is_given_its_proxy_in_both_spellings() -> None:
    """HTTP_PROXY and HTTPS_PROXY (and curl's lower-case ones) name the proxy; loopback is not proxied."""
    env = worker_proxy_env("172.18.0.3")
    assert env["HTTP_PROXY"] == env["https_proxy"] == f"http://172.18.0.3:{PROXY_PORT}"
    assert env["NO_PROXY"] == env["no_proxy"] == "localhost,127.0.0.1,::1"


def test_an_egress_type_has_a_network_of_its_tenant_and_list() -> None:
    """No list: the tenant's own network; a list: another, the same for the same list whatever its order, its own for
    another list or another tenant."""
    assert machine_network_key("p", "acme", ()) == network_key("p", "acme")
    opted = machine_network_key("p", "acme", ("a.org", "b.org:8080"))
    assert opted == machine_network_key("p", "acme", ("b.org:8080", "a.org")) != network_key("p", "acme")
    assert opted != machine_network_key("p", "acme", ("a.org",))
    assert opted != machine_network_key("p", "globex", ("a.org", "b.org:8080"))
