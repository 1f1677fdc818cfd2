"""Erase a subject's rows from the audit runs' artifacts: the browsable trajectory samples.

The audit (pipelines/audit.py) logs each batch's sample as an MLflow table: a JSON artifact in pandas' split
form, {"columns": [...], "data": [[...], ...]}, with a tenant_id and a session_id column, so a row is matched
like a table row (Subject.holds). Every JSON artifact of that form with a session_id column is a table that
holds rows, whatever its name; the audit's other artifacts (batch.json: offsets and counts, the reward
histogram figure) and its params, metrics and tags hold no session, task, user or text.

MLflow cannot edit an artifact, so a table holding the subject's rows is written again at the same path
without them (the UI shows the filtered one). The embedded server (served artifacts in a local folder) writes
an upload to a hidden file beside the target and renames it over the old one: no file under its artifacts
folder keeps the old bytes. A production artifact store that keeps versions (an S3 bucket with versioning)
keeps the old object as a noncurrent version: the deployment's to expire.

Deleted runs are erased too: a run cut short and logged again is deleted, and its artifacts stay until
`mlflow gc`. A table written before samples carried tenant_id is matched under the subject's tenant: its rows
cannot tell tenants apart and erasure errs toward dropping, so a whole tenant's erasure empties such a table.
"""

from __future__ import annotations

import json

from liverl.io.tracking import Tracking, TrackingRun
from liverl.privacy.subject import Subject


def erase_audit_artifacts(tracking_uri: str, experiment: str, subject: Subject) -> int:
    """Rewrite every table artifact of the experiment's runs without the subject's rows; returns how many rows
    were dropped (0: nothing was rewritten)."""
    tracking = Tracking(tracking_uri)
    dropped = 0
    for run_id in tracking.run_ids(experiment, deleted=True):
        run = TrackingRun(tracking, run_id)
        for path in run.artifact_files():
            if path.endswith(".json"):
                dropped += _erase_table(run, path, subject)
    return dropped


def _erase_table(run: TrackingRun, path: str, subject: Subject) -> int:
    """Rows dropped from the artifact at path; it is rewritten only when some were."""
    table = _parsed(run, path)
    if not _is_table(table):
        return 0
    columns = table["columns"]
    session = columns.index("session_id")
    tenant = columns.index("tenant_id") if "tenant_id" in columns else None
    kept = [row for row in table["data"]
            if not subject.holds(subject.tenant if tenant is None else row[tenant], row[session])]
    if len(kept) == len(table["data"]):
        return 0
    # The form MLflow's log_table writes (pandas to_json, orient="split"); log_table itself would append.
    run.log_text(json.dumps({**table, "data": kept}, separators=(",", ":")), path)
    return len(table["data"]) - len(kept)


def _parsed(run: TrackingRun, path: str):
    try:
        return json.loads(run.read_artifact(path))
    except ValueError as error:
        raise ValueError(
            f"artifact {path} of run {run.run_id} is not JSON ({error}), so it cannot be checked for the subject's "
            "rows. Open it in the MLflow UI; if it holds trajectory rows, delete the run "
            "(`mlflow runs delete` then `mlflow gc`), then run the erasure again.") from error


def _is_table(value) -> bool:
    return (isinstance(value, dict) and isinstance(value.get("columns"), list)
            and isinstance(value.get("data"), list) and "session_id" in value["columns"])
