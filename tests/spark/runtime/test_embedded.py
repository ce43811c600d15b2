"""The embedded services stop completely: no broker or object store outlives its `with` block."""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest

from spark.runtime.embedded import kafka_service, s3_service

pytestmark = pytest.mark.slow  # whole intervals, Spark or services: make test-fast leaves it out (docs/testing.md)


def processes_using(folder: Path) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["cmdline"]):
        if any(str(folder) in part for part in p.info["cmdline"] or ()):
            found.append(p)
    return found


@pytest.mark.parametrize("service", [kafka_service, s3_service], ids=["noida-db", "seaweedfs"])
def test_a_stopped_service_leaves_no_process_behind(service, tmp_path: Path) -> None:
    with service(tmp_path):
        running = processes_using(tmp_path)
        assert running, "the service's processes name its data folder"
    leftovers = [p for p in processes_using(tmp_path) if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not leftovers, [p.info["cmdline"] for p in leftovers]


def test_seaweedfs_ports_never_take_another_service_grpc_port(monkeypatch: pytest.MonkeyPatch) -> None:
    """``weed mini`` refuses a port equal to another's gRPC port (port + 10000): drawn apart, the
    four ports once collided (a test run's S3 failed to start); such a draw is drawn again."""
    from spark.runtime import embedded

    draws = iter([20000, 31000, 30000, 32000,  # 30000 is 20000's gRPC port
                  20001, 31001, 41001, 32001,  # 41001 is 31001's
                  20002, 31002, 30003, 32002])
    monkeypatch.setattr(embedded, "free_port", lambda also_plus=None: next(draws))
    assert embedded.seaweed_ports() == [20002, 31002, 30003, 32002]


def test_a_stopped_object_store_leaves_no_socket_in_tmp(tmp_path: Path) -> None:
    """``weed mini`` makes Unix sockets in /tmp named by its ports and leaves them when stopped."""
    from tests.weed_sockets import sockets_made_since, weed_sockets

    before = weed_sockets()
    with s3_service(tmp_path):
        made = sockets_made_since(before)
    assert not made & weed_sockets()
