"""The whole configuration: one section per stage plus the shared infrastructure."""

from pydantic import model_validator

from liverl.config.ingest import IngestConfig
from liverl.config.kafka import KafkaConfig
from liverl.config.mlflow import MlflowConfig
from liverl.config.pipelines import PipelinesConfig
from liverl.config.privacy import PrivacyConfig
from liverl.config.rewards import RewardsConfig
from liverl.config.section import Section
from liverl.config.serving import ServingConfig
from liverl.config.stack import StackConfig
from liverl.config.table import TableConfig
from liverl.config.trainer import TrainerConfig


class LiverlConfig(Section):
    """Every section. Unset addresses point at the embedded stack; unset folders lie under stack.data_dir."""

    kafka: KafkaConfig = KafkaConfig()
    mlflow: MlflowConfig = MlflowConfig()
    stack: StackConfig = StackConfig()
    table: TableConfig = TableConfig()
    ingest: IngestConfig = IngestConfig()
    serving: ServingConfig = ServingConfig()
    pipelines: PipelinesConfig = PipelinesConfig()
    trainer: TrainerConfig = TrainerConfig()
    rewards: RewardsConfig = RewardsConfig()
    privacy: PrivacyConfig = PrivacyConfig()

    @model_validator(mode="after")
    def _fill_embedded_defaults(self) -> "LiverlConfig":
        stack = self.stack
        if self.kafka.bootstrap_servers is None:
            self.kafka.bootstrap_servers = f"{stack.broker_host}:{stack.broker_port}"
        if self.mlflow.tracking_uri is None:
            self.mlflow.tracking_uri = f"http://{stack.mlflow_host}:{stack.mlflow_port}"
        data = stack.data_dir
        if self.table.trajectories_uri is None:
            self.table.trajectories_uri = str(data / "tables" / "trajectories")
        if self.table.dead_letters_uri is None:
            self.table.dead_letters_uri = str(data / "tables" / "dead_letters")
        if self.trainer.checkpoint_dir is None:
            self.trainer.checkpoint_dir = data / "checkpoints"
        if self.trainer.signing_key_file is None:
            self.trainer.signing_key_file = data / "keys" / "signing.pem"
        if self.serving.verify_key_file is None:
            self.serving.verify_key_file = data / "keys" / "verify.pem"
        if self.privacy.keys_dir is None:
            self.privacy.keys_dir = data / "keys" / "subjects"
        if self.privacy.audit_log is None:
            self.privacy.audit_log = data / "audit" / "erasures.jsonl"
        return self
