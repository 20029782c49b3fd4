"""The instance types SageMaker's API accepts (sagemaker_instances.json), so that a plan naming
another is refused before anything is sent, the same with or without botocore installed.

Refresh the file from botocore's model of the API, in a venv with the newer botocore:
`python -m cloudgpu.providers.sagemaker_instances`.
"""

from __future__ import annotations

import datetime
import functools
import json
from pathlib import Path

LISTS = Path(__file__).parent.parent / "sagemaker_instances.json"
SHAPES = ("TrainingInstanceType", "ProductionVariantInstanceType")


@functools.cache
def names(shape: str) -> tuple[str, ...]:
    """The values SageMaker takes for `shape`: one of SHAPES."""
    return tuple(json.loads(LISTS.read_text(encoding="utf-8"))[shape])


def refresh() -> None:
    import botocore
    from botocore.session import get_session

    model = get_session().get_service_model("sagemaker")
    data = json.loads(LISTS.read_text(encoding="utf-8"))
    data["source"] = (
        f"botocore {botocore.__version__}, its SageMaker service model "
        "(botocore/data/sagemaker/2017-07-24/service-2.json), the enums of those two shapes"
    )
    data["read"] = datetime.date.today().isoformat()
    data.update({shape: list(model.shape_for(shape).enum) for shape in SHAPES})
    LISTS.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    print(f"{LISTS}: {data['source']}")


if __name__ == "__main__":
    refresh()
