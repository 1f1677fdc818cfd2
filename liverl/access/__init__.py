"""Edge access control that more than one stage applies to its callers, written once.

- `token_bucket`: token buckets keyed by caller (a tenant, an API key): a steady rate with a burst.
- `bearer`: "authorization: Bearer <secret>" parsing, and matching a secret against a table of known
  ones in constant time.
- `opt_out`: the tenants and users nothing may be recorded of (ingest.opt_out_*), asked by every entry.

Mechanism only: which callers exist, what a refusal looks like on the wire, and which config field names
the limit belong to each stage.
"""
