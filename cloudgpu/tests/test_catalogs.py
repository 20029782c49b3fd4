"""The data a cloud launch is made of, before any cloud is asked: every catalog row complete,
priced and sourced; run ids valid on every cloud, and hostile ones refused."""

from __future__ import annotations

import datetime
import re

import pytest

from cloudgpu import catalog, plan


def test_every_catalog_row_is_complete_priced_and_sourced() -> None:
    data = catalog.load()
    assert datetime.date.fromisoformat(data["as_of"]) <= datetime.date.today()
    for source in data["sources"].values():
        assert source["url"].startswith("https://") and source["what"]
        assert datetime.date.fromisoformat(source["read"]) <= datetime.date.today()
        assert source["dated"] == "unknown" or datetime.date.fromisoformat(source["dated"])
    for cloud in catalog.CLOUDS:
        image = catalog.vm_image(cloud)
        assert re.fullmatch(r"\d{3}", image["driver"]) and image["source"] in data["sources"]
        for offer in catalog.rows(cloud):
            assert offer.machine and offer.vcpus > 0 and offer.memory_gib > 0, offer
            assert offer.on_demand > 0, offer
            assert offer.spot is None or offer.spot > 0, offer
            assert offer.spot is not None or offer.note, f"{offer}: say why there is no spot price"
            assert offer.gpu in data["gpus"]
    assert "2" not in data["clouds"]["aws"]["gpus"]["t4"], "AWS has no 2 x T4"


def test_run_ids_fit_every_clouds_naming_rules() -> None:
    now = datetime.datetime(2026, 12, 1, 9, 30, tzinfo=datetime.UTC)
    for project in ("cloud-gpu-project", "a-very-long-project-name-indeed-for-runs", "7up"):
        run_id = plan.new_run_id(project, now)
        assert plan.RUN_ID.fullmatch(run_id) and len(run_id) <= 40, run_id
        assert "261201-093000" in run_id
    for hostile in ("Run_1", "proj-261201-1-ab\n", "../proj", "proj-261201-1-ab\nrm -rf /"):
        with pytest.raises(plan.PlanError, match="lowercase letters"):
            plan.check_run_id(hostile)
