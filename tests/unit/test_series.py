"""The series document (servedeck.ab.series): a profile's runs and experiments in order, and
its MLflow export to a local file store (the ``mlflow`` extra, mlflow-skinny)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from servedeck.ab.experiment import compare_runs
from servedeck.ab.series import build_series, export_mlflow, family, render_series
from servedeck.errors import ServedeckError

RUNS = Path(__file__).resolve().parent.parent / "fixtures" / "runs"


@pytest.fixture(scope="module")
def runs_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("series") / "runs"
    root.mkdir()
    for name in ("0002-base-b70", "0003-batch-8192-b70"):
        shutil.copytree(RUNS / name, root / name)
    compare_runs(root, [root / "0002-base-b70"], [root / "0003-batch-8192-b70"],
                 out=root / "reports" / "0002-base-b70_vs_0003-batch-8192-b70" / "report.md")
    return root


def test_the_series_lists_runs_and_experiments_in_order(runs_dir):
    assert family(runs_dir, "base") == ["base", "batch-8192"]
    assert family(runs_dir, "batch-8192") == ["batch-8192", "base"]
    series = build_series(runs_dir, "base")
    assert [r.sequence for r in series.runs] == [2, 3]
    assert series.runs[1].startup["kv_cache_tokens"] == 236470
    assert series.runs[0].medians["warm decode_tok_s"] == 57.0
    (exp,) = series.experiments
    assert (exp.variable, exp.a, exp.b, exp.action) == ("max_num_batched_tokens", 4096, 8192, "revert")
    text = render_series(series)
    assert "| #2 `0002-base-b70` | base | b70 |" in text and "| #3 `0003-batch-8192-b70` | batch-8192 |" in text
    assert "| 1 | #2 → #3 | `max_num_batched_tokens` 4096 → 8192 | revert |" in text
    assert "compile 113.37 s" in text
    assert "1. **#2 → #3**: Revert max_num_batched_tokens to 4096" in text
    with pytest.raises(ServedeckError, match="no run of profile 'quality'"):
        build_series(runs_dir, "quality")


def test_the_series_exports_to_mlflow(runs_dir, tmp_path):
    mlflow = pytest.importorskip("mlflow")
    uri = (tmp_path / "mlruns").as_uri()
    exported = export_mlflow(build_series(runs_dir, "base"), runs_dir, uri)
    assert set(exported) == {"0002-base-b70", "0003-batch-8192-b70", "0002-base-b70 vs 0003-batch-8192-b70"}
    client = mlflow.MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("servedeck base")
    runs = {r.info.run_name: r for r in client.search_runs([exp.experiment_id])}
    b = runs["0003-batch-8192-b70"]
    assert b.data.params["engine.max_num_batched_tokens"] == "8192" and b.data.params["profile"] == "batch-8192"
    assert b.data.metrics["warm_decode_tok_s"] == 56.6 and b.data.metrics["startup_kv_cache_tokens"] == 236470
    assert b.data.tags["servedeck.sequence"] == "3"
    assert [a.path for a in client.list_artifacts(b.info.run_id)] == ["docker-compose.yml"]
    artifact = Path(client.download_artifacts(b.info.run_id, "docker-compose.yml", str(tmp_path)))
    assert artifact.read_bytes() == (runs_dir / "0003-batch-8192-b70" / "docker-compose.yml").read_bytes()
    e = runs["0002-base-b70 vs 0003-batch-8192-b70"]
    assert e.data.params["variable"] == "max_num_batched_tokens" and e.data.tags["servedeck.action"] == "revert"
    assert e.data.metrics["ratio_warm_decode_tok_s"] == pytest.approx(56.6 / 57.0)
    assert "report.md" in [a.path for a in client.list_artifacts(e.info.run_id)]
