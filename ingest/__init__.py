"""Ingest: the capture service (shadow backend) and the Python SDK an agent product calls."""
