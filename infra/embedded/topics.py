"""Create liverl's topics if they are missing. Works on any Kafka: the embedded broker or a cluster."""

from __future__ import annotations

from liverl.config.kafka import KafkaConfig


def ensure_topics(kafka: KafkaConfig) -> list[str]:
    """Create the session-events, model-calls and dead-letters topics; return the ones created."""
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic
    from kafka.errors import TopicAlreadyExistsError

    wanted = [kafka.session_events_topic, kafka.model_calls_topic, kafka.dead_letters_topic]
    admin = KafkaAdminClient(**kafka.client_kwargs())
    try:
        existing = set(admin.list_topics())
        missing = [name for name in wanted if name not in existing]
        created = []
        for name in missing:
            try:
                admin.create_topics([NewTopic(name, kafka.partitions, kafka.replication_factor)])
                created.append(name)
            except TopicAlreadyExistsError:  # another process won the race: fine
                pass
        return created
    finally:
        admin.close()
