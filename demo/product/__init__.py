"""The demo agent product: simulated users, three task families and the sessions that tie them to liverl.

It uses liverl the way a real product would: the policy through serving's API (GrpcPolicy for the toy policy,
HttpChatPolicy for a chat model; LocalPolicy in the evaluator and tests), and every session recorded through the
ingest SDK (a CaptureClient). The toy policy plays the grammar tasks (session.py), a chat model the chat tasks
(chat_session.py); one traffic loop (traffic.py) runs either.
"""

from demo.product.policy import Completion, Policy
from demo.product.session import SessionStats
from demo.product.traffic import TrafficStats, run_traffic

__all__ = ["Completion", "Policy", "SessionStats", "TrafficStats", "run_traffic"]
