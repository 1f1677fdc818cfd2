"""The reward library: versioned, pure reward components over a session, and the trainer-side mixing.

Shared by the pipelines (which label raw components into the table) and the trainer (which mixes
them with weights that follow its own step), so it lives with the contracts.

    from liverl.rewards import label, mix, version_monitors, drift_report
    row_label = label(session_record, "main", config.rewards)                          # pipelines
    reward = mix(row["reward_components"], row["task_family"], step, config.rewards)   # trainer
    figures = version_monitors(rows)                                                   # trainer's gate
    report = drift_report(figures[candidate], figures.get(champion), config.rewards.monitors)
    mlflow.log_metrics(report.metrics()); mlflow.log_dict(report.to_dict(), "drift_report.json"); report.ok

With the generative judge (the only I/O; imported explicitly so `import liverl.rewards` stays light):
    from liverl.rewards.batch import label_batch
    from liverl.rewards.judge import Judge
    with Judge(config.rewards.judge) as judge:
        labels = label_batch([(session_record, "main"), ...], config.rewards, judge)
"""

from liverl.rewards.judgement import Judgement
from liverl.rewards.labeling import label
from liverl.rewards.mixing import mix, mix_terms
from liverl.rewards.monitors import DriftReport, drift_report, version_monitors
from liverl.rewards.session import RewardLabel, SessionRecord
from liverl.rewards.token_credit import token_rewards

__all__ = [
    "DriftReport", "Judgement", "RewardLabel", "SessionRecord", "drift_report", "label", "mix", "mix_terms",
    "token_rewards", "version_monitors",
]
