"""The gRPC API's generated Python code (from proto/psoup/v1/psoup.proto).

Regenerate with ``python3 -m psoup.api.generate``; tests/test_api_generated.py fails when
these files are stale. Import the messages and stubs from here::

    from psoup.api import psoup_pb2 as pb, psoup_pb2_grpc as pb_grpc
"""
