import threading
import time

from demo.product.feedback import DelayedFeedback


def test_sends_after_the_delay_in_due_order_and_counts_failures():
    sent = []
    scheduled_at = time.monotonic()
    feedback = DelayedFeedback()
    feedback.schedule(0.3, lambda: sent.append(("late", time.monotonic())))
    feedback.schedule(0.1, lambda: sent.append(("early", time.monotonic())))
    feedback.schedule(0.0, lambda: 1 / 0)
    assert feedback.wait(timeout_s=10)
    assert [name for name, _ in sent] == ["early", "late"]
    assert all(at - scheduled_at >= delay for (_, at), delay in zip(sent, (0.1, 0.3)))
    assert (feedback.sent, feedback.failed, feedback.pending) == (2, 1, 0)
    feedback.close()


def test_close_without_sending_drops_what_is_pending():
    fired = threading.Event()
    feedback = DelayedFeedback()
    feedback.schedule(60.0, fired.set)
    assert feedback.pending == 1
    assert not feedback.wait(timeout_s=0.05)
    feedback.close(send_pending=False)
    assert not fired.is_set() and feedback.sent == 0
