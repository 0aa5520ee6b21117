"""A trial's network is IPv4 only, and so is its firewall (runtime/firewall.py): a dataset's
compose file asking for IPv6 is refused at load, naming the file and field, never ignored."""

from __future__ import annotations

import pytest

from orchestrator.errors import InputError
from orchestrator.tasks.compose import load_compose


@pytest.mark.parametrize("compose, field", [
    ("services:\n  main: {}\nnetworks:\n  default:\n    enable_ipv6: true\n", "networks.default.enable_ipv6"),
    ("services:\n  main: {}\n  db:\n    image: redis:7\n    networks:\n      default:\n"
     "        ipv6_address: fd00::9\n", "services.db.networks.default.ipv6_address"),
])
def test_a_compose_file_asking_for_ipv6_is_refused(tmp_path, compose, field):
    path = tmp_path / "task/environment/docker-compose.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(compose)
    with pytest.raises(InputError, match=f"docker-compose.yaml: orchestra cannot honour `{field}`.*IPv4 only"):
        load_compose(path)


def test_networks_without_ipv6_still_load(tmp_path):
    path = tmp_path / "task/environment/docker-compose.yaml"
    path.parent.mkdir(parents=True)
    path.write_text("services:\n  main: {}\nnetworks:\n  default:\n    driver: bridge\n")
    assert list(load_compose(path).services) == ["main"]
