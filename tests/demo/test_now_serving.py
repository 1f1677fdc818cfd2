"""The held-out comparison plays the version serving now, not the version of whichever session finished last."""

from types import SimpleNamespace

from demo.run import _now_serving
from liverl.io.processes import free_port


def session(version: str, started_at: float):
    return SimpleNamespace(served_version=version, started_at=started_at)


def test_without_an_answer_from_serving_the_latest_started_session_names_the_version():
    port = free_port()  # nothing listens: serving has gone
    config = SimpleNamespace(serving=SimpleNamespace(host="127.0.0.1", grpc_port=port),
                             demo=SimpleNamespace(run=SimpleNamespace(serving_api_key="")))
    # the session that finished last started before the swap; the one started after it names the served version
    traffic = SimpleNamespace(sessions=[session("1", 10.0), session("2", 30.0), session("1", 20.0)])
    assert _now_serving(config, traffic) == "2"
    assert _now_serving(config, SimpleNamespace(sessions=[])) == "?"
