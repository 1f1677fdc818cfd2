"""Where the topics live. The same section points at the embedded broker or a real Kafka cluster."""

from typing import Literal

from pydantic import Field, field_validator

from liverl.config.section import Section

MIN_RETENTION_MS = 60_000


class KafkaConfig(Section):
    bootstrap_servers: str | None = None
    """Comma-separated host:port list; unset: the embedded broker (stack.broker_host:broker_port)."""
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    """Transport security of a real cluster."""
    sasl_mechanism: str | None = None
    """E.g. "PLAIN" or "SCRAM-SHA-512" when the cluster uses SASL."""
    sasl_username: str | None = None
    """SASL user name, with sasl_mechanism."""
    sasl_password: str | None = None
    """SASL password, with sasl_mechanism (pass it through LIVERL_KAFKA__SASL_PASSWORD, not a file)."""
    ssl_cafile: str | None = None
    """PEM file of the certificate authorities that signed the brokers' certificates (SSL, SASL_SSL)."""
    session_events_topic: str = "liverl.session-events"
    """SessionEvent records, key = session id."""
    model_calls_topic: str = "liverl.model-calls"
    """ModelCall records, key = session id."""
    dead_letters_topic: str = "liverl.dead-letters"
    """Rejected input with its reason, written by ingest and serving."""
    partitions: int = Field(4, ge=1, le=100_000)
    """Partitions per topic when liverl creates them."""
    replication_factor: int = Field(1, ge=1, le=100)
    """Replication per topic when liverl creates them (3 on a real cluster)."""
    topic_retention_ms: int = Field(7 * 24 * 3600 * 1000, ge=-1)
    """retention.ms of the topics liverl creates: keep it above the longest time the distiller may be stopped,
    or records are deleted before they are distilled (pipelines.on_retention_gap decides what happens then).
    -1: keep records forever (Kafka's convention); 0 up to a minute is refused (records would be gone before
    anyone read them)."""

    @field_validator("topic_retention_ms")
    @classmethod
    def _retention_keeps_records_a_while(cls, value: int) -> int:
        if 0 <= value < MIN_RETENTION_MS:
            raise ValueError(f"{value} ms deletes records before they can be distilled: give at least "
                             f"{MIN_RETENTION_MS} ms (hours in production), or -1 to keep them forever")
        return value

    def client_kwargs(self) -> dict:
        """Connection arguments shared by every kafka-python client."""
        kwargs: dict = {"bootstrap_servers": (self.bootstrap_servers or "").split(","),
                        "security_protocol": self.security_protocol}
        if self.sasl_mechanism:
            kwargs |= {"sasl_mechanism": self.sasl_mechanism,
                       "sasl_plain_username": self.sasl_username,
                       "sasl_plain_password": self.sasl_password}
        if self.ssl_cafile:
            kwargs["ssl_cafile"] = self.ssl_cafile
        return kwargs

    def librdkafka_settings(self) -> dict:
        """The same connection settings under librdkafka's names (confluent-kafka clients)."""
        settings: dict = {"bootstrap.servers": self.bootstrap_servers or "",
                          "security.protocol": self.security_protocol}
        if self.sasl_mechanism:
            settings |= {"sasl.mechanism": self.sasl_mechanism, "sasl.username": self.sasl_username,
                         "sasl.password": self.sasl_password}
        if self.ssl_cafile:
            settings["ssl.ca.location"] = self.ssl_cafile
        return settings
