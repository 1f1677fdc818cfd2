"""Pipelines: Beam jobs that distill Kafka topics into the reward-labelled trajectory table."""
