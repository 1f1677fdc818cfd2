"""What crosses the trainer's edge: base policies, exports and weight probes, the registry, publishing, signing,
lineage, the table's row stream and the state file."""
