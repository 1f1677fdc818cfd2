"""Create liverl's topics if they are missing. Works on any Kafka: the embedded broker or a cluster.

Every topic is created with an explicit cleanup.policy and retention.ms, never the cluster's defaults:
- cleanup.policy "delete", never "compact": records are keyed by session, and compaction would keep only the
  last record of each session, silently deleting the events the distiller reads by offset range;
- retention.ms = kafka.topic_retention_ms: records older than that are deleted, distilled or not.
Existing topics are left as they are (alter them with the cluster's own tools).
"""

from __future__ import annotations

from liverl.config.kafka import KafkaConfig


def topic_configs(kafka: KafkaConfig) -> dict[str, str]:
    """The topic-level settings liverl's topics are created with."""
    return {"cleanup.policy": "delete", "retention.ms": str(kafka.topic_retention_ms)}


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
                admin.create_topics([NewTopic(name, kafka.partitions, kafka.replication_factor,
                                              topic_configs=topic_configs(kafka))])
                created.append(name)
            except TopicAlreadyExistsError:  # another process won the race: fine
                pass
        return created
    finally:
        admin.close()
