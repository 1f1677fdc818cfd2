"""The MLflow tracking server and model registry every stage talks to."""

from liverl.config.section import Section


class MlflowConfig(Section):
    tracking_uri: str | None = None
    """Tracking and registry server; unset: the embedded one (stack.mlflow_host:mlflow_port)."""
    registered_model: str = "liverl-policy"
    """One registered model per policy."""
    audit_experiment: str = "liverl-distill"
    """Experiment of the pipelines' per-batch audit runs."""
    training_experiment: str = "liverl-train"
    """Experiment of the trainer's runs."""
    demo_experiment: str = "liverl-demo"
    """Experiment where the demo logs its report."""
