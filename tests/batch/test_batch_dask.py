"""The dask.distributed path: the same work on a LocalCluster gives the same rows as the local pool,
and timeouts and dead workers are recorded there too."""

from __future__ import annotations

from pathlib import Path

import pytest

from hloflops.batch.run import run_batch
from hloflops.batch.db import ResultsDB, comparable_rows
from tests.support.batch_fixtures import fake_by_content, make_mixed_dir

distributed = pytest.importorskip("distributed")
dask = pytest.importorskip("dask")


@pytest.fixture(scope="module")
def cluster():
    # A dead worker fails its task at once instead of retrying it on three more workers.
    with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
        with distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None, silence_logs=40
        ) as local_cluster:
            yield local_cluster


def _rows(db: Path) -> list[dict]:
    with ResultsDB(db) as results:
        # engine_version is left out: dask workers compute it from the sources when they start,
        # and a working tree being edited during the test could differ by then
        return [{k: v for k, v in r.items() if k != "engine_version"} for r in comparable_rows(results.module_rows())]


def test_dask_gives_the_local_pool_rows(cluster, tmp_path: Path) -> None:
    mixed = make_mixed_dir(tmp_path / "in")
    local = run_batch([mixed["dump"].parent], db=tmp_path / "local.sqlite", processes=2, progress=False)
    remote = run_batch(
        [mixed["dump"].parent], db=tmp_path / "dask.sqlite", scheduler=cluster.scheduler_address, progress=False
    )
    local_rows, dask_rows = _rows(tmp_path / "local.sqlite"), _rows(tmp_path / "dask.sqlite")
    assert len(dask_rows) == local.files and sum(r["status"] == "ok" for r in dask_rows) >= len(mixed["good"]) + 1
    assert dask_rows == local_rows
    assert (remote.files, remote.failed, remote.exit_code) == (local.files, local.failed, 1)

    # cached rerun through dask: nothing is sent
    again = run_batch([mixed["dump"].parent], db=tmp_path / "dask.sqlite", scheduler=cluster.scheduler_address,
                      progress=False)
    assert again.analyzed == 2 and again.cached == again.files - 2  # only the two unreadable ones are retried


def test_dask_timeout_and_dead_worker(cluster, tmp_path: Path) -> None:
    src = tmp_path / "in"
    src.mkdir()
    contents = {"hang.hlo": b"HANG", "crash.hlo": b"CRASH", **{f"ok{i}.hlo": b"HloModule m%d\n" % i for i in range(4)}}
    for name, data in contents.items():
        (src / name).write_bytes(data)
    db = tmp_path / "out.sqlite"
    summary = run_batch([src], db=db, scheduler=cluster.scheduler_address, timeout_s=3, worker_fn=fake_by_content,
                        progress=False)
    with ResultsDB(db) as results:
        rows = {Path(r["path"]).name: r for r in results.module_rows()}
    assert set(rows) == set(contents)
    assert rows["hang.hlo"]["status"] == "timeout"
    assert rows["crash.hlo"]["status"] == "crashed" and "dask worker died" in rows["crash.hlo"]["error"]
    assert all(rows[f"ok{i}.hlo"]["status"] == "ok" for i in range(4))
    assert summary.failed == 2
    # the cluster is still usable afterwards (the hung worker was restarted, the dead one replaced)
    client = distributed.Client(cluster.scheduler_address, set_as_default=False)
    try:
        assert client.submit(sum, [1, 2, 3]).result(timeout=60) == 6
    finally:
        client.close()
