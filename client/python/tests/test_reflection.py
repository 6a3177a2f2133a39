"""gRPC reflection as stock Python tools see it: grpcio-reflection asks v1alpha."""

from __future__ import annotations

import pytest

from helpers import Server


def test_stock_v1alpha_client_lists_and_describes_the_services(server: Server) -> None:
    try:
        import grpc
        from google.protobuf.descriptor_pool import DescriptorPool
        from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase
    except ImportError as err:
        pytest.fail(f"{err}: pip install -r client/python/requirements-test.txt")
    with grpc.insecure_channel(server.addr) as channel:
        database = ProtoReflectionDescriptorDatabase(channel)
        services = database.get_services()
        for name in ["readerd.v1.DataService", "grpc.health.v1.Health"]:
            assert name in services, services
        # The services' descriptors arrive too, with the files they import.
        pool = DescriptorPool(database)
        assert "Read" in pool.FindServiceByName("readerd.v1.DataService").methods_by_name
        assert "Check" in pool.FindServiceByName("grpc.health.v1.Health").methods_by_name
