"""Run one of Beam's portability services bound to the loopback interface only.

Beam hard-codes "[::]" (every interface) for the external worker pool and for the job service's logging
server; servers in tests listen on 127.0.0.1 only. So this launcher rewrites those binds, then runs Beam's
own entry point unchanged:

    python loopback_beam.py apache_beam.runners.worker.worker_pool_main --service_port=P
"""

import runpy
import sys

import grpc._server


def _bind_loopback_only() -> None:
    add_insecure_port = grpc._server._Server.add_insecure_port

    def loopback(self, address: str) -> int:
        if address.startswith("[::]:"):
            address = "127.0.0.1:" + address[len("[::]:"):]
        return add_insecure_port(self, address)

    grpc._server._Server.add_insecure_port = loopback


if __name__ == "__main__":
    _bind_loopback_only()
    module, sys.argv = sys.argv[1], [sys.argv[1], *sys.argv[2:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
