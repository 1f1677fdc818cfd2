"""The demo agent product and `liverl demo`: the whole loop on the embedded stack."""
