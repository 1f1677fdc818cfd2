"""A runnable agent-product example: record one coding session with the SDK and, optionally, send its
model call through serving's OpenAI-compatible API so the call is captured with zero code.

    liverl up && liverl capture &                          # broker + capture service
    python ingest/examples/record_session.py               # SDK path only
    liverl serve & python ingest/examples/record_session.py --base-url http://127.0.0.1:8000/v1
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from ingest.sdk import CaptureClient, FeedbackKind
from liverl.contracts import names


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", default="127.0.0.1:50051", help="capture service gRPC address")
    parser.add_argument("--token", default="demo-token", help="the tenant's capture token")
    parser.add_argument("--base-url", default=None, help="serving's OpenAI-compatible URL, e.g. http://HOST:8000/v1")
    parser.add_argument("--api-key", default="none", help="serving API key, where keys are configured")
    args = parser.parse_args(argv)

    spool = Path(tempfile.gettempdir()) / "liverl-example-spool"
    client = CaptureClient(target=args.target, token=args.token, spool_dir=spool)
    session = client.start_session(task_family="coding", task_id="fix-bug-1", user_id="user-1")
    session.user_message("the test in a.py fails, please fix it", follow_up=False)

    request_id = ""
    if args.base_url:  # zero-code capture: serving records this call as a ModelCall with the session id
        from openai import OpenAI

        llm = OpenAI(base_url=args.base_url, api_key=args.api_key,
                     default_headers={names.META_SESSION_ID: session.session_id, names.META_AGENT_ROLE: "single",
                                      names.META_AGENT_ID: "main"})
        model = llm.models.list().data[0].id
        reply = llm.chat.completions.with_raw_response.create(
            model=model, messages=[{"role": "user", "content": "fix the failing test"}], max_tokens=8)
        request_id = reply.parse().id
        print(f"model call {request_id} served by policy version {reply.headers.get(names.META_POLICY_VERSION)}")

    call_id = session.tool_call("edit", json.dumps({"file": "a.py", "line": 3}), request_id=request_id)
    session.tool_result(call_id, "applied", is_error=False)
    session.outcome(success=True, score=1.0, detail="tests pass")
    session.end("completed")
    # An hour later the edit is still there: feedback joins the session by its id.
    client.feedback(session.session_id, FeedbackKind.EDIT_KEPT, value=1.0, target_call_id=call_id)

    delivered = client.flush(timeout_s=10.0)
    print(f"session {session.session_id}: delivered={delivered} stats={client.stats()}")
    client.close()
    return 0 if delivered else 1


if __name__ == "__main__":
    raise SystemExit(main())
