"""The responses kept for previous_response_id: found only by their own tenant, bounded per tenant and overall
(least recently used out first), expired after the TTL."""

from serving.http.responses.state import ResponseStore


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


def _store(max_stored=4, max_per_tenant=2, ttl_s=10.0):
    clock = Clock()
    return ResponseStore(max_stored, max_per_tenant, ttl_s, clock), clock


def test_a_response_is_found_by_its_own_tenant_only():
    store, _ = _store()
    store.put("acme", "resp_1", store.new("s-1", ({"role": "user", "content": "fix"},), frozenset()))
    assert store.get("acme", "resp_1").session_id == "s-1"
    assert store.get("globex", "resp_1") is None and store.get("acme", "resp_2") is None


def test_each_tenant_keeps_its_most_recently_used_and_all_tenants_are_bounded():
    store, _ = _store()
    for n in range(3):
        store.put("acme", f"a{n}", store.new("s", (), frozenset()))
    assert store.get("acme", "a0") is None and store.tenant_size("acme") == 2  # per-tenant bound
    store.get("acme", "a1")  # used: a2 is now the least recent of acme
    for n in range(3):
        store.put(f"t{n}", "x", store.new("s", (), frozenset()))
    assert len(store) == 4 and store.get("acme", "a1") is not None and store.get("acme", "a2") is None


def test_a_response_expires_after_the_ttl_and_none_are_kept_at_zero():
    store, clock = _store()
    store.put("acme", "resp_1", store.new("s", (), frozenset()))
    clock.now = 10.5
    assert store.get("acme", "resp_1") is None and len(store) == 0
    none_kept, _ = _store(max_stored=0)
    none_kept.put("acme", "resp_1", none_kept.new("s", (), frozenset()))
    assert none_kept.get("acme", "resp_1") is None
