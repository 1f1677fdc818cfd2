"""Tenant groups: each named tenant's group and the shared one, their adapters on one base, their versions."""
