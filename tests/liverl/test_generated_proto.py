"""Generated protobuf code is importable as liverl.v1 and never stale against proto/."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_generated_code_is_up_to_date():
    result = subprocess.run([sys.executable, "scripts/gen_proto.py", "--check"], cwd=ROOT, capture_output=True,
                            text=True)
    assert result.returncode == 0, result.stderr


def test_proto_folder_is_schema_only():
    assert not (ROOT / "proto" / "__init__.py").exists()  # `import proto` belongs to proto-plus


def test_session_event_round_trips():
    from liverl.v1 import session_event_pb2

    event = session_event_pb2.SessionEvent(event_id="e1", session_id="s1", tenant_id="t")
    event.tool_call.name = "edit"
    decoded = session_event_pb2.SessionEvent.FromString(event.SerializeToString())
    assert decoded.WhichOneof("body") == "tool_call" and decoded.tool_call.name == "edit"
