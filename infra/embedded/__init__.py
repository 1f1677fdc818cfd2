"""The embedded stack: a Kafka-protocol broker (tansu) and an MLflow server, started as real processes."""
