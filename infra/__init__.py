"""Infrastructure: the embedded stack for one machine, and manifests for a real deployment."""
